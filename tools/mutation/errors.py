"""Exceptions of the mutation runner, under a root of their own.

The runner mutates sgconf's own modules, so it must import nothing of sgconf: a module
already imported when its mutant is installed keeps its original code in every importer
(`AlreadyImported`). Its errors therefore cannot derive from `sgconf.errors.SgconfError`;
`MutationError` is their root, and the error-root test names it as the one exception.
"""

from __future__ import annotations


class MutationError(Exception):
    """Base of every error the mutation runner reports to its user (exit status 2)."""


class MutationConfigError(MutationError, ValueError):
    """`mutation.toml` or the equivalents file is missing, unreadable or ill-formed."""


class BaselineFailed(MutationError, RuntimeError):
    """A module's tests fail (or hang) without any mutation, so no mutant can be judged."""


class AlreadyImported(MutationError, RuntimeError):
    """Raised when a module to mutate is already imported: its importers would keep the original code."""
