"""Exceptions of the mutation runner, under `tools.errors.ToolError` (and so `sgconf.errors.SgconfError`)."""

from __future__ import annotations

from tools.errors import ToolError


class MutationError(ToolError):
    """Base of every error the mutation runner reports to its user (exit status 2)."""


class MutationConfigError(MutationError, ValueError):
    """`mutation.toml` or the equivalents file is missing, unreadable or ill-formed."""


class BaselineFailed(MutationError, RuntimeError):
    """A module's tests fail (or hang) without any mutation, so no mutant can be judged."""


class AlreadyImported(MutationError, RuntimeError):
    """Raised when a module to mutate is already imported: its importers would keep the original code."""
