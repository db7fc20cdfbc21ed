"""Exceptions raised by the attention package; imports nothing of ours but sgconf's base errors."""

from __future__ import annotations

from sgconf.errors import ConfigError, SgconfError


class AttentionBackendUnavailable(ConfigError, LookupError):
    """Raised when the configured attention backend is not registered or cannot run here."""


class AttentionInputError(SgconfError, ValueError):
    """Raised when a forward batch or the q/k/v tensors do not fit the layer or the pools."""
