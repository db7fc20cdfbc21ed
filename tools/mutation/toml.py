"""The TOML reader of the mutation runner: `tomllib` from Python 3.11, its backport `tomli` before that.

Its own copy rather than the ratchet's, because the runner mutates `tools/ratchet`
modules and so must not import them itself.
"""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

TOMLDecodeError = tomllib.TOMLDecodeError
loads = tomllib.loads

__all__ = ["TOMLDecodeError", "loads"]
