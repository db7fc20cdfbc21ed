"""Exceptions raised by the runtime context; each also subclasses a builtin so callers may catch either."""

from __future__ import annotations

from sgconf.errors import ConfigError, OverrideRefused


class NotPublishedError(RuntimeError):
    """Raised when config is read (or overridden) before any `publish()`."""


class ContextReplacedError(RuntimeError):
    """Raised when a write goes to a context that a later `publish()` replaced."""


class StaleProposalError(ConfigError, RuntimeError):
    """Raised when a validated override is committed after the config it was checked against changed."""


class RevertConflict(OverrideRefused):
    """Raised when `receipt.revert()` would undo a field that a later override changed again."""


class RoleViolation(PermissionError):
    """Raised in `enforce` mode when a role reads a namespace outside its declared set."""


__all__ = [
    "ContextReplacedError",
    "NotPublishedError",
    "RevertConflict",
    "RoleViolation",
    "StaleProposalError",
]
