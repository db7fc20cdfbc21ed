"""Exceptions of the read ratchet, rooted in `sgconf.errors.SgconfError` like every error the project raises.

tools/ may import sgconf (and nothing else of ours), so the ratchet's refusals share the
project's root: a caller that catches `SgconfError` around it catches them.
"""

from __future__ import annotations

from sgconf.errors import SgconfError


class RatchetError(SgconfError):
    """Base of every error the ratchet reports to its user (exit status 2)."""


class RatchetConfigError(RatchetError, ValueError):
    """`ratchet.toml` is missing, unreadable, or holds an unknown or ill-typed key."""


class BaselineRefused(RatchetError, ValueError):
    """`update` would raise a count without `--allow-increase --reason`."""


class NewSyntaxError(RatchetError, SyntaxError):
    """A file uses grammar newer than the project's `target_version`."""
