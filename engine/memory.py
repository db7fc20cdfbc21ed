"""The engine's KV memory: request table, KV pool(s), allocator, and the draft worker's pool.

Everything is read from one config snapshot (`build_memory(snap, ...)`), so an override
landing while the pools are built cannot mix two configurations.
"""

from __future__ import annotations

from typing import Any

import attrs

from engine.machine import refuse_unhonoured
from engine.memory_guard import MemoryNeed, check_fits, usable_bytes
from engine.model import runnable
from engine.weights import weights_bytes
from mem_cache.allocator import PagedKVAllocator
from mem_cache.model_shape import ModelShape
from mem_cache.pool_configurator import MemoryPoolConfig
from mem_cache.pools import KVPool, ReqToTokenPool

WEIGHT_DTYPES = ("float32", "float16", "bfloat16")


@attrs.define(slots=True)
class EngineMemory:
    """The pools the engine and its draft worker run on, and the limits that came with them."""

    page_size: int
    max_total_tokens: int
    max_running_requests: int
    max_context_len: int
    req_to_token_pool: ReqToTokenPool
    kv_pool: KVPool
    allocator: PagedKVAllocator
    spec_algorithm: str | None = None
    draft_shape: ModelShape | None = None
    draft_kv_pool: KVPool | None = None
    plan: MemoryPoolConfig | None = None

    def describe(self) -> dict[str, Any]:
        """Pool sizes for `/server_info` and stats."""
        out: dict[str, Any] = {
            "page_size": self.page_size,
            "max_total_tokens": self.max_total_tokens,
            "max_running_requests": self.max_running_requests,
            "max_context_len": self.max_context_len,
            "kv_pool": type(self.kv_pool).__name__,
            "kv_pool_bytes": int(self.kv_pool.nbytes()),
            "req_to_token_bytes": int(self.req_to_token_pool.nbytes()),
        }
        target_map = getattr(self.kv_pool, "full_to_swa_index_mapping", None)
        size_swa = getattr(self.kv_pool, "size_swa", None)
        if size_swa is not None and target_map is not None:
            out["swa_tokens"] = int(size_swa)
            out["swa_index_map_bytes"] = int(target_map.nbytes)
        if self.draft_kv_pool is not None:
            out["draft_kv_pool_bytes"] = int(self.draft_kv_pool.nbytes())
            mapping = getattr(self.draft_kv_pool, "full_to_swa_index_mapping", None)
            if mapping is not None and mapping is not target_map:
                out["draft_index_map_bytes"] = int(mapping.nbytes)  # a full-capacity draft's own identity map
        out["total_bytes"] = sum(v for k, v in out.items() if k.endswith("_bytes"))
        if self.plan is not None and hasattr(self.plan, "describe"):
            out["plan"] = self.plan.describe()
        return out


def build_memory(snap: Any, shape: ModelShape) -> EngineMemory:
    """Plan and build the pools through the KV-cache configurator, from one config snapshot.

    The plan is the one `sgconf plan` prints for the same settings: the same
    configurator, the same budget (`kv_budget`: `kv_cache_memory_bytes`, or measured
    device memory times mem_fraction_static), the same draft shape. Raises ConfigError
    for a setting this engine cannot honour here, before anything is allocated. Before
    anything is allocated, the weights (target and draft) plus the planned pools go
    through the memory guard (`engine.memory_guard`).
    """
    from mem_cache.kv_cache_configurator import (
        KVCacheConfigurator,
        device_of,
        draft_shape_from_snapshot,
    )

    refuse_unhonoured(snap)
    algorithm = snap.spec.speculative_algorithm
    draft_shape = runnable(draft_shape_from_snapshot(snap, shape), name="draft") if algorithm else None
    weights = {
        d: weights_bytes(shape, d) + (weights_bytes(draft_shape, d) if draft_shape else 0) for d in WEIGHT_DTYPES
    }
    device, dtype = device_of(snap), str(snap.model.dtype)
    usable = usable_bytes(device, float(snap.schedule.mem_fraction_static or 0.8))
    context = int(snap.model.context_length or shape.max_position_embeddings or 1)
    check_fits(MemoryNeed(dtype, weights, 0, 0, context, device), usable)  # the weights alone, before planning
    configurator = KVCacheConfigurator(shape, draft_shape=draft_shape, snapshot=snap)
    plan = configurator.plan()
    check_fits(
        MemoryNeed(dtype, weights, int(plan.total_bytes), int(plan.max_total_num_tokens), context, device), usable
    )
    target = configurator.build()
    memory = EngineMemory(
        page_size=plan.page_size,
        max_total_tokens=plan.max_total_num_tokens,
        max_running_requests=plan.max_num_reqs,
        max_context_len=plan.req_to_token_shape[1],
        req_to_token_pool=target.req_to_token_pool,
        kv_pool=target.kv_pool,
        allocator=target.allocator,
        spec_algorithm=algorithm,
        plan=plan,
    )
    if draft_shape is not None:
        draft = KVCacheConfigurator(
            shape, is_draft_worker=True, target=target, draft_shape=draft_shape, snapshot=snap
        ).build()
        memory.draft_shape = draft_shape
        memory.draft_kv_pool = draft.kv_pool
    return memory
