"""Exceptions of the mutation runner; this module imports nothing of ours."""

from __future__ import annotations


class MutationError(Exception):
    """Base of every error the mutation runner reports to its user (exit status 2)."""


class MutationConfigError(MutationError, ValueError):
    """`mutation.toml` or the equivalents file is missing, unreadable or ill-formed."""


class BaselineFailed(MutationError, RuntimeError):
    """A module's tests fail (or hang) without any mutation, so no mutant can be judged."""
