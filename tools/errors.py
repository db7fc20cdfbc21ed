"""The root of the tools' own errors, itself rooted in `sgconf.errors.SgconfError` like every error the project raises.

tools/ may import sgconf (and nothing else of ours), so one root covers them too: a
caller that catches `SgconfError` around a tool catches its refusals. Each tool's
`errors.py` derives its own base from `ToolError`.
"""

from __future__ import annotations

from sgconf.errors import SgconfError


class ToolError(SgconfError):
    """Base of every error a tool reports to its user (exit status 2)."""


__all__ = ["ToolError"]
