"""The read ratchet: count raw record field reads per file and let the counts only go down."""

from __future__ import annotations

from tools.ratchet.baseline import Outcome, compare, updated_counts  # noqa: E402
from tools.ratchet.config import Exempt, RatchetConfig, UnreadAllow, load_config  # noqa: E402
from tools.ratchet.errors import BaselineRefused, RatchetConfigError, RatchetError  # noqa: E402
from tools.ratchet.rules import RULES, Rule  # noqa: E402
from tools.ratchet.runner import collect_files, scan_files  # noqa: E402
from tools.ratchet.settings import ScanSettings  # noqa: E402
from tools.ratchet.sites import KINDS, AllowComment, FileScan, Site  # noqa: E402
from tools.ratchet.version import __version__

__all__ = [
    "AllowComment",
    "BaselineRefused",
    "Exempt",
    "FileScan",
    "KINDS",
    "Outcome",
    "RULES",
    "RatchetConfig",
    "RatchetConfigError",
    "RatchetError",
    "Rule",
    "ScanSettings",
    "Site",
    "UnreadAllow",
    "__version__",
    "collect_files",
    "compare",
    "load_config",
    "scan_files",
    "updated_counts",
]
