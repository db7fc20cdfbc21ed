"""The storage tier protocol, its counters and the base class every backend builds on.

A backend stores opaque page payloads under string keys. Public methods live on
`StorageBase` and do the framing (page_codec), the accounting and the logging once;
a backend only implements the raw `_read/_write/_has/_discard` steps. A page that
fails to decode is counted in `stats.corrupt_skipped`, dropped and reported as
missing: a damaged storage tier costs a recompute, never a crash.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import attrs
import structlog

from mem_cache.hicache.errors import CorruptPageError, StorageAttachError
from mem_cache.hicache.page_codec import decode_page, encode_page
from sgconf.suggest import did_you_mean

log = structlog.get_logger("mem_cache.hicache.storage")

BACKEND_FIELD = "hicache_storage_backend"
EXTRA_CONFIG_FIELD = "hicache_storage_backend_extra_config"


@attrs.frozen(slots=True)
class StorageStats:
    """Counters of one backend since it was opened (a snapshot; it never changes)."""

    gets: int = 0
    hits: int = 0
    misses: int = 0
    puts: int = 0
    puts_skipped: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    corrupt_skipped: int = 0
    write_errors: int = 0


@runtime_checkable
class StorageBackend(Protocol):
    """What the HiCache controller needs from a storage tier."""

    name: str

    def get(self, key: str) -> bytes | None:
        """Return the payload stored under `key`, or None if absent or damaged."""
        ...

    def put(self, key: str, data: bytes) -> bool:
        """Store `data` under `key`; returns False when it could not be written (counted)."""
        ...

    def exists(self, key: str) -> bool:
        """Whether a page is stored under `key` (cheap; a damaged page may still say True)."""
        ...

    def flush(self) -> None:
        """Make every completed `put` durable."""
        ...

    def close(self) -> None:
        """Release the backend; idempotent. Later calls behave as an empty store."""
        ...

    @property
    def stats(self) -> StorageStats: ...


class StorageBase:
    """Template for backends: framing, counters and logging around four raw steps."""

    name = "base"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._closed = False

    # -- public API (do not override) -------------------------------------------------
    def get(self, key: str) -> bytes | None:
        self._bump("gets")
        if self._closed:
            self._bump("misses")
            return None
        raw = self._read(key)
        if raw is None:
            self._bump("misses")
            return None
        try:
            payload = decode_page(key, raw)
        except CorruptPageError as exc:
            self._bump("corrupt_skipped")
            self._bump("misses")
            log.warning("hicache.storage.corrupt_page", backend=self.name, key=key, reason=str(exc))
            self._discard(key)
            return None
        self._bump("hits")
        self._bump("bytes_read", len(payload))
        return payload

    def put(self, key: str, data: bytes) -> bool:
        if self._closed:
            return False
        if self._has(key):
            # keys name a whole prefix, so an existing page already holds these bytes
            self._bump("puts_skipped")
            return True
        framed = encode_page(key, data)
        try:
            self._write(key, framed)
        except OSError as exc:
            self._bump("write_errors")
            log.warning("hicache.storage.write_failed", backend=self.name, key=key, error=str(exc))
            return False
        self._bump("puts")
        self._bump("bytes_written", len(data))
        return True

    def exists(self, key: str) -> bool:
        return not self._closed and self._has(key)

    def flush(self) -> None:
        if not self._closed:
            self._flush()

    def close(self) -> None:
        if self._closed:
            return
        self._flush()
        self._closed = True
        self._close()

    def abandon(self) -> None:
        """Close, and undo what opening created (e.g. a new empty directory) if unused.

        Used when a prepared attach is aborted, so a refused attach leaves nothing behind.
        """
        self.close()
        if not self.stats.puts:
            self._abandon()

    @property
    def stats(self) -> StorageStats:
        with self._lock:
            return StorageStats(**self._counts)

    # -- raw steps (backends implement these) ----------------------------------------
    def _read(self, key: str) -> bytes | None:
        raise NotImplementedError

    def _write(self, key: str, framed: bytes) -> None:
        raise NotImplementedError

    def _has(self, key: str) -> bool:
        raise NotImplementedError

    def _discard(self, key: str) -> None:
        raise NotImplementedError

    def _flush(self) -> None:
        return None

    def _close(self) -> None:
        return None

    def _abandon(self) -> None:
        return None

    def _bump(self, counter: str, n: int = 1) -> None:
        with self._lock:
            self._counts[counter] = self._counts.get(counter, 0) + n


def check_options(backend: str, extra_config: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    """Refuse option keys a backend does not know, with a did-you-mean hint."""
    for key in extra_config:
        if key not in allowed:
            hint = did_you_mean(str(key), allowed, normalize=False).replace(" -- ", "; ")
            msg = (
                f"unknown option {key!r} in '{EXTRA_CONFIG_FIELD}' for the {backend} backend"
                f" -- known options: {', '.join(allowed)}{hint}"
            )
            raise StorageAttachError(msg, field=f"{EXTRA_CONFIG_FIELD}.{key}", value=extra_config[key])


__all__ = [
    "StorageBackend",
    "StorageBase",
    "StorageStats",
    "check_options",
]
