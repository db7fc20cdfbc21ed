"""Exceptions raised by the HiCache tiers; this module imports nothing of ours but the root error.

Each also subclasses a builtin so callers can catch either: a backend that cannot be
opened is an `OSError`, a page that fails its checksum a `ValueError`, a prepared
attach used twice a `RuntimeError`.
"""

from __future__ import annotations

from sgconf.errors import SgconfError


class HiCacheError(SgconfError):
    """Base of every error raised by the HiCache tiers."""


class StorageAttachError(HiCacheError, OSError):
    """Raised when a storage backend cannot be created or opened; nothing was changed.

    `field` names the config leaf at fault (`hicache_storage_backend_extra_config.dir`),
    `value` the value given, so an HTTP layer can return them as a 400/422 body.
    """

    def __init__(self, message: str, *, field: str, value: object = None) -> None:
        self.field = field
        self.value = value
        super().__init__(message)

    def __str__(self) -> str:  # OSError would otherwise format errno/filename
        return str(self.args[0])


class CorruptPageError(HiCacheError, ValueError):
    """Raised by the page codec when stored bytes are torn, truncated or fail their checksum."""


class ForgedPageError(CorruptPageError):
    """Raised by the page codec when a page's checksum holds but its MAC does not, or it was moved under another key."""


class LayoutMismatchError(HiCacheError, ValueError):
    """Raised when KV tensors do not match the page layout a host pool was built for."""


class AttachStateError(HiCacheError, RuntimeError):
    """Raised when a prepared attach is committed or aborted after it was already settled."""


__all__ = [
    "AttachStateError",
    "CorruptPageError",
    "ForgedPageError",
    "HiCacheError",
    "LayoutMismatchError",
    "StorageAttachError",
]
