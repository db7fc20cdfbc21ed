"""The storage tier protocol, its counters and the base class every backend builds on.

A backend stores opaque page payloads under string keys. Public methods live on
`StorageBase` and do the framing and authentication (page_codec), the accounting,
the write back-off and the logging once; a backend only implements the raw
`_read/_write/_has/_discard` steps. A page that fails to decode is counted
(`corrupt_skipped` when damaged, `forged_skipped` when its MAC is wrong or it was moved
under another key), dropped and reported as missing: a damaged or tampered storage
tier costs a recompute, never a crash and never a wrong page. Nothing stored is trusted
for its size either: once the owner states the page size its layout implies
(`bound_pages`), a stored page larger than one framed page of that size is a miss,
counted in `oversized_skipped` and removed, and backends read no more than that bound
plus one byte (a 256 MiB file in a storage directory costs one page of memory, not
256 MiB). Writes that fail put the
tier in a degraded state (`write_backoff.WriteBackoff`): it logs once, skips writes
while it waits (exponential, capped), and recovers on the first write that lands.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import attrs
import structlog

from mem_cache.hicache.errors import CorruptPageError, ForgedPageError, StorageAttachError
from mem_cache.hicache.mac_key import random_key
from mem_cache.hicache.page_codec import HEADER_SIZE, PageCodec
from mem_cache.hicache.write_backoff import WriteBackoff
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
    forged_skipped: int = 0  # pages whose MAC failed, or moved under another key
    oversized_skipped: int = 0  # stored pages larger than the layout's page, removed unread
    unsafe_skipped: int = 0  # symbolic links or special files where a page or shard directory belongs, removed
    write_errors: int = 0
    writes_deferred: int = 0  # writes skipped while the tier backed off after failures


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

    @property
    def degraded(self) -> bool:
        """Whether writes are failing and being backed off."""
        ...

    def describe(self) -> dict[str, Any]:
        """What status pages show: the backend, where it keeps pages, how they are authenticated, its health."""
        ...


class StorageBase:
    """Template for backends: framing, authentication, counters, back-off and logging around four raw steps.

    A backend starts with a random process-local MAC key; `create_storage_backend`
    replaces it with the configured or stored key (`use_mac_key`) before any page moves.
    `clock` (monotonic seconds) drives the write back-off; tests pass their own.
    """

    name = "base"
    stored_key_source = "backend"  # how describe() names a key from stored_mac_key()

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        backoff_base_s: float = 0.5,
        backoff_cap_s: float = 60.0,
    ) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._closed = False
        self.codec = PageCodec(random_key())
        self.key_source = "process"
        self.clock = clock
        self._backoff = WriteBackoff(backoff_base_s, backoff_cap_s)
        self._warned: set[str] = set()  # the events _warn_once logged already
        self.page_bytes: int | None = None  # payload bytes of one page, once bound_pages() said so

    def bound_pages(self, page_bytes: int) -> None:
        """Treat any stored page larger than one framed page of `page_bytes` payload as a miss.

        The HiCache controller calls this with its layout's page size before any page moves.
        """
        if page_bytes < 1:
            msg = f"a page holds at least one byte (got page_bytes={page_bytes})"
            raise ValueError(msg)
        self.page_bytes = int(page_bytes)

    def read_limit(self, key: str) -> int | None:
        """The most bytes a stored page of `key` may have (None before `bound_pages`); backends read at most one more."""
        if self.page_bytes is None:
            return None
        return HEADER_SIZE + len(key.encode("utf-8")) + self.page_bytes

    def use_mac_key(self, key: bytes, *, source: str) -> None:
        """Authenticate pages with `key` from now on; `source` says where it came from (shown, never the key)."""
        self.codec = PageCodec(key)
        self.key_source = source

    def stored_mac_key(self) -> bytes | None:
        """The key this backend keeps alongside its pages, created if needed; None when it keeps none."""
        return None

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
        limit = self.read_limit(key)
        if limit is not None and len(raw) > limit:
            self._bump("oversized_skipped")
            self._bump("misses")
            self._warn_once(
                "hicache.storage.oversized_page", "oversized_skipped", "oversized pages", key=key, limit_bytes=limit
            )
            self._discard(key)
            return None
        try:
            payload = self.codec.decode(key, raw)
        except ForgedPageError as exc:
            self._bump("forged_skipped")
            self._bump("misses")
            self._warn_once("hicache.storage.forged_page", "forged_skipped", "forged pages", key=key, reason=str(exc))
            self._discard(key)
            return None
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
        now = self.clock()
        with self._lock:
            allowed = self._backoff.allows(now)
        if not allowed:
            self._bump("writes_deferred")
            return False
        if self._has(key):
            # keys name a whole prefix, so an existing page already holds these bytes
            self._bump("puts_skipped")
            return True
        framed = self.codec.encode(key, data)
        try:
            self._write(key, framed)
        except OSError as exc:
            self._bump("write_errors")
            with self._lock:
                began = self._backoff.failed(now, str(exc))
                retry_in = self._backoff.delay_s()
            if began:
                log.warning("hicache.storage.degraded", backend=self.name, key=key, error=str(exc), retry_in_s=retry_in)
            else:
                log.debug(
                    "hicache.storage.write_failed", backend=self.name, key=key, error=str(exc), retry_in_s=retry_in
                )
            return False
        with self._lock:
            ended = self._backoff.succeeded()
        if ended:
            log.info("hicache.storage.recovered", backend=self.name, failed_writes_in_a_row=ended)
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

    @property
    def degraded(self) -> bool:
        with self._lock:
            return self._backoff.degraded

    def describe(self) -> dict[str, Any]:
        with self._lock:
            health = self._backoff.describe(self.clock())
        return {
            "backend": self.name,
            **self._location(),
            "authentication": "hmac-sha256" if self.codec.authenticated else "none",
            "mac_key_source": self.key_source,
            **health,
        }

    def _location(self) -> dict[str, Any]:
        """Where the pages live (the file backend's resolved directory); nothing for an in-process tier."""
        return {}

    # -- raw steps (backends implement these) ----------------------------------------
    def _read(self, key: str) -> bytes | None:
        """The stored bytes of `key`, or None; at most `read_limit(key) + 1` bytes when a limit is set."""
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

    def _warn_once(self, event: str, counter: str, what: str, **fields: Any) -> None:
        """Log `event` the first time it happens on this backend; later ones count only in `counter`.

        Once per backend: a flood of forged or oversized pages (or unsafe entries) must
        not flood the log.
        """
        with self._lock:
            first = event not in self._warned
            self._warned.add(event)
        if first:
            note = f"further {what} are counted in {counter}, not logged"
            log.warning(event, backend=self.name, **fields, note=note)


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
