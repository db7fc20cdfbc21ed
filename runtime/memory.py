"""The engine's KV memory: request table, KV pool(s), allocator, and the draft worker's pool.

Everything is read from one config snapshot (`build_memory(snap, ...)`), so an override
landing while the pools are built cannot mix two configurations.
"""

from __future__ import annotations

from typing import Any

import attrs

from runtime.model import ModelShape

DEFAULT_KV_TOKENS = 8192
DEFAULT_MAX_RUNNING = 64


@attrs.define(slots=True)
class EngineMemory:
    """The pools the engine and its draft worker run on, and the limits that came with them."""

    page_size: int
    max_total_tokens: int
    max_running_requests: int
    max_context_len: int
    req_to_token_pool: Any
    kv_pool: Any
    allocator: Any
    spec_algorithm: str | None = None
    draft_shape: ModelShape | None = None
    draft_kv_pool: Any = None
    plan: Any = None

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
        size_swa = getattr(self.kv_pool, "size_swa", None)
        if size_swa is not None:
            out["swa_tokens"] = int(size_swa)
        if self.draft_kv_pool is not None:
            out["draft_kv_pool_bytes"] = int(self.draft_kv_pool.nbytes())
        if self.plan is not None and hasattr(self.plan, "describe"):
            out["plan"] = self.plan.describe()
        return out


def draft_shape_for(shape: ModelShape, draft_config: dict[str, Any] | None) -> ModelShape:
    """The draft model's shape: its own config when given, else the target's first layer (an early-exit draft)."""
    if draft_config is not None:
        return ModelShape.from_config(draft_config)
    return attrs.evolve(shape, num_layers=1, layer_types=shape.layer_types[:1])


def build_memory(snap: Any, shape: ModelShape, model_config: dict[str, Any]) -> EngineMemory:
    """Size and build the pools for `shape` from the snapshot's schedule, memory and spec bags."""
    from mem_cache.allocator import PagedTokenToKVPoolAllocator, SWATokenToKVPoolAllocator
    from mem_cache.pools import MHATokenToKVPool, ReqToTokenPool, SWAKVPool

    sched, spec = snap.schedule, snap.spec
    page = int(sched.page_size or 1)
    context_len = int(snap.model.context_length or shape.max_position_embeddings)
    algorithm = spec.speculative_algorithm
    steps = int(spec.speculative_num_steps or 0) if algorithm else 0
    extra = max(4 + steps + 1, 2 * (steps + 1) + page - 1) if algorithm else 4
    max_context_len = context_len + extra
    tokens = int(sched.max_total_tokens or DEFAULT_KV_TOKENS) // page * page
    max_running = int(sched.max_running_requests or DEFAULT_MAX_RUNNING)
    dtype = snap.model.kv_cache_dtype
    req_pool = ReqToTokenPool(max_running, max_context_len)
    swa_ids = shape.swa_layer_ids
    if swa_ids and shape.full_layer_ids and not sched.disable_hybrid_swa_memory:
        ratio = float(sched.swa_full_tokens_ratio or 0.8)
        swa_tokens = max(int(tokens * ratio) // page * page, page)
        pool: Any = SWAKVPool(
            tokens,
            swa_tokens,
            page,
            dtype,
            shape.num_kv_heads,
            shape.head_dim,
            swa_attention_layer_ids=swa_ids,
            full_attention_layer_ids=shape.full_layer_ids,
        )
        allocator: Any = SWATokenToKVPoolAllocator(tokens, swa_tokens, page, pool)
    else:
        pool = MHATokenToKVPool(tokens, page, dtype, shape.num_kv_heads, shape.head_dim, layer_ids=range(shape.num_layers))
        allocator = PagedTokenToKVPoolAllocator(tokens, page, pool)
    memory = EngineMemory(page, tokens, max_running, max_context_len, req_pool, pool, allocator, algorithm)
    if algorithm:
        draft_cfg = _draft_config(spec)
        dshape = draft_shape_for(shape, draft_cfg)
        memory.draft_shape = dshape
        # A draft keeps a full-only pool at the target's slots: its sliding layers are
        # masked by window but stored at full slots (attention.swa: draft_with_full_pool).
        memory.draft_kv_pool = MHATokenToKVPool(
            tokens, page, dtype, dshape.num_kv_heads, dshape.head_dim, layer_ids=range(dshape.num_layers)
        )
    return memory


def _draft_config(spec: Any) -> dict[str, Any] | None:
    from sgconf.models import load_model_config

    if spec.speculative_draft_model_config is None and spec.speculative_draft_model_path is None:
        return None
    return load_model_config(spec.speculative_draft_model_path or "", spec.speculative_draft_model_config)
