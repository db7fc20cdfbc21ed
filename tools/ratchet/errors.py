"""Exceptions of the read ratchet; this module imports nothing of ours."""

from __future__ import annotations


class RatchetError(Exception):
    """Base of every error the ratchet reports to its user (exit status 2)."""


class RatchetConfigError(RatchetError, ValueError):
    """`ratchet.toml` is missing, unreadable, or holds an unknown or ill-typed key."""


class BaselineRefused(RatchetError, ValueError):
    """`update` would raise a count without `--allow-increase --reason`."""


class NewSyntaxError(SyntaxError):
    """A file uses grammar newer than the project's `target_version`."""
