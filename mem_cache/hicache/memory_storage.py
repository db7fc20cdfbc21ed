"""The `memory` storage backend: framed pages in a dict, for tests and single-process use.

Option `store` (a name) makes controllers in one process share the same dict, so a
test can write through one controller and read through a fresh one; without it every
backend gets its own dict.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from mem_cache.hicache.errors import StorageAttachError
from mem_cache.hicache.storage import (
    EXTRA_CONFIG_FIELD,
    StorageBase,
    check_options,
)

OPTIONS = ("store",)

_SHARED: dict[str, dict[str, bytes]] = {}
_SHARED_LOCK = threading.Lock()


class MemoryStorage(StorageBase):
    """Pages kept in a Python dict (framed like on disk, so damage is detected the same way)."""

    name = "memory"

    def __init__(self, pages: dict[str, bytes] | None = None) -> None:
        super().__init__()
        self.pages: dict[str, bytes] = {} if pages is None else pages

    def _read(self, key: str) -> bytes | None:
        return self.pages.get(key)

    def _write(self, key: str, framed: bytes) -> None:
        self.pages[key] = framed

    def _has(self, key: str) -> bool:
        return key in self.pages

    def _discard(self, key: str) -> None:
        self.pages.pop(key, None)


def open_memory_storage(extra_config: Mapping[str, Any]) -> MemoryStorage:
    """Factory for backend name `memory`; see the module docstring for options."""
    check_options("memory", extra_config, OPTIONS)
    store = extra_config.get("store")
    if store is None:
        return MemoryStorage()
    if not isinstance(store, str) or not store:
        msg = f"'{EXTRA_CONFIG_FIELD}.store' must be a non-empty string (got {store!r}) -- name the shared store, e.g. \"test\""
        raise StorageAttachError(msg, field=f"{EXTRA_CONFIG_FIELD}.store", value=store)
    with _SHARED_LOCK:
        pages = _SHARED.setdefault(store, {})
    return MemoryStorage(pages)


def clear_shared_stores() -> None:
    """Forget every named shared store (tests call this between cases)."""
    with _SHARED_LOCK:
        _SHARED.clear()


__all__ = ["MemoryStorage", "clear_shared_stores", "open_memory_storage"]
