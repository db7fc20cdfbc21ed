"""Exceptions of the mutation runner, rooted in `sgconf.errors.SgconfError` like every error the project raises.

tools/ may import sgconf (and nothing else of ours), so one root covers them too: a
caller that catches `SgconfError` around a tool catches its refusals.
"""

from __future__ import annotations

from sgconf.errors import SgconfError


class MutationError(SgconfError):
    """Base of every error the mutation runner reports to its user (exit status 2)."""


class MutationConfigError(MutationError, ValueError):
    """`mutation.toml` or the equivalents file is missing, unreadable or ill-formed."""


class BaselineFailed(MutationError, RuntimeError):
    """A module's tests fail (or hang) without any mutation, so no mutant can be judged."""


class AlreadyImported(MutationError, RuntimeError):
    """Raised when a module to mutate is already imported: its importers would keep the original code."""
