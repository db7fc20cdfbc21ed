"""mem_cache: KV memory planning, pools, allocators and the HiCache tiers.

Users write `from mem_cache import SWAKVPool, SWATokenToKVPoolAllocator`.
"""

from __future__ import annotations

from mem_cache.allocator import (
    KVAllocator,
    PagedTokenToKVPoolAllocator,
    SWATokenToKVPoolAllocator,
    TokenToKVPoolAllocator,
)
from mem_cache.errors import (
    DoubleFreeError,
    ForeignIndexError,
    InsufficientMemoryError,
    ModelShapeError,
    PlanError,
    PoolError,
)
from mem_cache.pools import KVPool, MHATokenToKVPool, ReqToTokenPool, SWAKVPool

__all__ = [
    "DoubleFreeError",
    "ForeignIndexError",
    "InsufficientMemoryError",
    "KVAllocator",
    "KVPool",
    "MHATokenToKVPool",
    "ModelShapeError",
    "PagedTokenToKVPoolAllocator",
    "PlanError",
    "PoolError",
    "ReqToTokenPool",
    "SWAKVPool",
    "SWATokenToKVPoolAllocator",
    "TokenToKVPoolAllocator",
]
