"""HiCache: a host-memory tier and pluggable storage behind the device KV pool.

`HiCacheController` is the entry point; it takes the device pool and plain config
values, never reads configuration itself. Storage backends register by name
(`file`, `memory`) and share one protocol, `StorageBackend`.
"""

from __future__ import annotations

from mem_cache.hicache.attach_inputs import PREFETCH_POLICIES, WRITE_POLICIES
from mem_cache.hicache.backends import create_storage_backend, register_storage_backend
from mem_cache.hicache.controller import (
    HiCacheController,
    HiCacheStats,
    PrefetchResult,
    PreparedAttach,
    StorageStatus,
)
from mem_cache.hicache.errors import (
    AttachStateError,
    CorruptPageError,
    ForgedPageError,
    HiCacheError,
    LayoutMismatchError,
    StorageAttachError,
)
from mem_cache.hicache.file_storage import FileStorage
from mem_cache.hicache.host_pool import HostKVPool
from mem_cache.hicache.layout import KVLayout, LayerGeometry, host_pool_pages, layout_of
from mem_cache.hicache.memory_storage import MemoryStorage
from mem_cache.hicache.page_codec import PageCodec
from mem_cache.hicache.prefix_keys import page_keys
from mem_cache.hicache.storage import StorageBackend, StorageBase, StorageStats
from mem_cache.hicache.write_backoff import WriteBackoff

__all__ = [
    "PREFETCH_POLICIES",
    "WRITE_POLICIES",
    "AttachStateError",
    "CorruptPageError",
    "FileStorage",
    "ForgedPageError",
    "HiCacheController",
    "HiCacheError",
    "HiCacheStats",
    "HostKVPool",
    "KVLayout",
    "LayerGeometry",
    "LayoutMismatchError",
    "MemoryStorage",
    "PageCodec",
    "PrefetchResult",
    "PreparedAttach",
    "StorageAttachError",
    "StorageBackend",
    "StorageBase",
    "StorageStats",
    "StorageStatus",
    "WriteBackoff",
    "create_storage_backend",
    "host_pool_pages",
    "layout_of",
    "page_keys",
    "register_storage_backend",
]
