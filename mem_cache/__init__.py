"""mem_cache: KV memory planning, pools, allocators and the HiCache tiers.

Users write `from mem_cache import SWAKVPool, SWATokenToKVPoolAllocator`.
"""

from __future__ import annotations

from mem_cache.allocation_sizing import (
    get_alloc_len_per_decode,
    get_alloc_reserve_per_decode,
    get_req_to_token_extra_context_len,
)
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
from mem_cache.kv_cache_configurator import KVCacheConfigurator, KVCacheMemory, configure_kv_cache
from mem_cache.model_shape import (
    ModelShape,
    draft_swa_full_capacity,
    is_hybrid_swa_mtp_draft,
    model_shape_from_config,
)
from mem_cache.pool_configurator import (
    DefaultPoolConfigurator,
    HybridSWAPoolConfigurator,
    MemoryPoolConfig,
    SWAChunkCapPoolConfigurator,
    validate_swa_pool_size,
)
from mem_cache.pools import KVPool, MHATokenToKVPool, ReqToTokenPool, SWAKVPool

__all__ = [
    "DefaultPoolConfigurator",
    "DoubleFreeError",
    "ForeignIndexError",
    "HybridSWAPoolConfigurator",
    "InsufficientMemoryError",
    "KVAllocator",
    "KVCacheConfigurator",
    "KVCacheMemory",
    "KVPool",
    "MHATokenToKVPool",
    "MemoryPoolConfig",
    "ModelShape",
    "ModelShapeError",
    "PagedTokenToKVPoolAllocator",
    "PlanError",
    "PoolError",
    "ReqToTokenPool",
    "SWAChunkCapPoolConfigurator",
    "SWAKVPool",
    "SWATokenToKVPoolAllocator",
    "TokenToKVPoolAllocator",
    "configure_kv_cache",
    "draft_swa_full_capacity",
    "get_alloc_len_per_decode",
    "get_alloc_reserve_per_decode",
    "get_req_to_token_extra_context_len",
    "is_hybrid_swa_mtp_draft",
    "model_shape_from_config",
    "validate_swa_pool_size",
]
