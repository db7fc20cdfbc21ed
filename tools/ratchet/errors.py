"""Exceptions of the read ratchet, under `tools.errors.ToolError` (and so `sgconf.errors.SgconfError`)."""

from __future__ import annotations

from tools.errors import ToolError


class RatchetError(ToolError):
    """Base of every error the ratchet reports to its user (exit status 2)."""


class RatchetConfigError(RatchetError, ValueError):
    """`ratchet.toml` is missing, unreadable, or holds an unknown or ill-typed key."""


class BaselineRefused(RatchetError, ValueError):
    """`update` would raise a count without `--allow-increase --reason`."""


class NewSyntaxError(RatchetError, SyntaxError):
    """A file uses grammar newer than the project's `target_version`."""
