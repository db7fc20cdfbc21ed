"""The TOML reader of the tools: `tomllib` from Python 3.11, its backport `tomli` before that.

Every TOML read under `tools/` imports it from here, so Python 3.10 works with the
`tomli` dependency that pyproject.toml declares for it. It lives outside `tools/ratchet`
and `tools/mutation` so that the mutation runner, which mutates ratchet modules, can
share it without importing any of them.
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
