"""What the HiCache controller reports, and the handle of a prepared attach: plain frozen values.

Kept apart from `mem_cache.hicache.controller` so that readers of the counters (the
engine's `/server_info`, `/metrics`) need not import the controller and torch with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from mem_cache.hicache.storage import StorageBase


@attrs.frozen(slots=True)
class HiCacheStats:
    """Counters since the controller was built (a snapshot)."""

    backed_up_pages: int
    host_hits: int  # pages load() served from host without storage I/O
    storage_hits: int  # pages read back from storage (prefetch or load fallback)
    prefetched_pages: int  # pages prefetch moved from storage into host
    corrupt_skipped: int  # damaged pages/temp files found in storage, across backends
    forged_skipped: int  # pages that failed their MAC or were moved under another key, across backends
    oversized_skipped: int  # stored pages larger than the layout's page, across backends
    unsafe_skipped: int  # links or special files in a storage directory, across backends
    read_timeouts: int  # storage waits on the engine's path cut short by read_timeout_s
    storage_writes: int
    write_errors: int
    host_evictions: int
    host_pages: int
    host_capacity: int
    pending_writes: int
    pending_prefetches: int
    storage_backend: str | None


@attrs.frozen(slots=True)
class PrefetchResult:
    """What prefetch() achieved: `ready_tokens` can be loaded now without storage I/O."""

    ready_tokens: int
    requested_pages: int  # pages beyond the host prefix that storage holds
    fetched_pages: int  # of those, in host when prefetch returned
    pending_pages: int  # of those, still being read (best_effort, timeout)
    timed_out: bool


@attrs.frozen(slots=True)
class StorageStatus:
    """The attached backend and the policies in force (what GET /hicache/storage-backend shows)."""

    backend: str | None
    extra_config: Mapping[str, Any] | None
    prefetch_policy: str
    write_policy: str


@attrs.define(slots=True, eq=False)
class PreparedAttach:
    """An opened, validated backend waiting for commit_attach or abort_attach."""

    backend_name: str
    extra_config: Mapping[str, Any]
    backend: StorageBase
    prefetch_policy: str
    write_policy: str
    owner: int  # id() of the controller that prepared it
    state: str = "prepared"  # prepared -> committed | aborted


__all__ = ["HiCacheStats", "PrefetchResult", "PreparedAttach", "StorageStatus"]
