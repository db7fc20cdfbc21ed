"""The engine's KV memory: request table, KV pool(s), allocator, and the draft worker's pool.

Everything is read from one config snapshot (`build_memory(snap, ...)`), so an override
landing while the pools are built cannot mix two configurations.
"""

from __future__ import annotations

from typing import Any

import attrs

from engine.memory_guard import MemoryNeed, check_fits, usable_bytes
from engine.model import runnable_shape
from engine.weights import weights_bytes
from mem_cache.allocator import PagedKVAllocator
from mem_cache.model_shape import ModelShape
from mem_cache.pool_configurator import MemoryPoolConfig
from mem_cache.pools import KVPool, ReqToTokenPool

CPU_KV_BUDGET_BYTES = 64 << 20
DEFAULT_MAX_RUNNING = 64
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
        size_swa = getattr(self.kv_pool, "size_swa", None)
        if size_swa is not None:
            out["swa_tokens"] = int(size_swa)
        if self.draft_kv_pool is not None:
            out["draft_kv_pool_bytes"] = int(self.draft_kv_pool.nbytes())
        if self.plan is not None and hasattr(self.plan, "describe"):
            out["plan"] = self.plan.describe()
        return out


def draft_config_for(model_config: dict[str, Any], spec: Any) -> dict[str, Any]:
    """The draft model's HF-style config: its own when the spec bag names one, else the target's
    first layer (an early-exit draft that shares the target's embedding and head weights)."""
    from sgconf.serving.models import load_model_config

    if spec.speculative_draft_model_config is not None or spec.speculative_draft_model_path is not None:
        return load_model_config(spec.speculative_draft_model_path or "", spec.speculative_draft_model_config)
    cfg = dict(model_config)
    cfg["num_hidden_layers"] = 1
    if isinstance(cfg.get("layer_types"), list):
        cfg["layer_types"] = cfg["layer_types"][:1]
    cfg.pop("swa_attention_layer_ids", None)
    return cfg


def build_memory(snap: Any, shape: ModelShape, model_config: dict[str, Any]) -> EngineMemory:
    """Plan and build the pools through the KV-cache configurator, from one config snapshot.

    Without `max_total_tokens` the budget is the configurator's default, capped at
    `CPU_KV_BUDGET_BYTES` on CPU: the embedded model needs little, and zero-filled
    gigabytes would only slow start-up. A plan that does not fit the cap is made from the
    uncapped budget instead, so a refusal always names the mem_fraction_static that fits.
    On cuda the weights share the device, so they come out of the budget first.
    Before anything is allocated, the weights (target and draft) plus the planned pools
    go through the memory guard (`engine.memory_guard`).
    """
    from mem_cache.errors import InsufficientMemoryError
    from mem_cache.kv_cache_configurator import (
        KVCacheConfigurator,
        default_available_bytes,
        device_of,
    )
    tp = int(snap.parallel.tp_size)  # ranks of any kind: this engine is one process, one rank
    if tp > 1:
        from sgconf.errors import ConfigError, Problem

        msg = (
            f"the embedded engine runs one rank, so it cannot serve tp_size {tp} (a plan for it is "
            f"`sgconf plan --tp-size {tp}`) -- start the engine with --tp-size 1"
        )
        raise ConfigError([Problem("$.parallel.tp_size", msg)], header="tensor parallelism is not executed here")

    target_shape = shape
    spec = snap.spec
    algorithm = spec.speculative_algorithm
    draft_cfg = draft_config_for(model_config, spec) if algorithm else None
    draft_mshape = runnable_shape(draft_cfg, name="draft") if draft_cfg is not None else None
    weights = {d: weights_bytes(shape, d) + (weights_bytes(draft_mshape, d) if draft_mshape else 0) for d in WEIGHT_DTYPES}
    device, dtype = device_of(snap), str(snap.model.dtype)
    usable = usable_bytes(device, float(snap.schedule.mem_fraction_static or 0.8))
    context = int(snap.model.context_length or shape.max_position_embeddings or 1)
    check_fits(MemoryNeed(dtype, weights, 0, 0, context, device), usable)  # the weights alone, before planning
    device_budget = default_available_bytes(snap)
    if device.startswith("cuda"):
        device_budget = max(device_budget - weights[dtype], 1)
    budget = min(device_budget, CPU_KV_BUDGET_BYTES) if str(snap.device.device) == "cpu" else device_budget
    try:
        configurator = KVCacheConfigurator(target_shape, budget, draft_shape=draft_mshape, snapshot=snap)
        plan = configurator.plan()
    except InsufficientMemoryError:
        if budget == device_budget:
            raise
        # the cap only saves start-up time: raising mem_fraction_static cannot lift it, so it
        # must not be what refuses a plan
        budget = device_budget
        configurator = KVCacheConfigurator(target_shape, budget, draft_shape=draft_mshape, snapshot=snap)
        plan = configurator.plan()
    check_fits(MemoryNeed(dtype, weights, int(plan.total_bytes), int(plan.max_total_num_tokens), context, device), usable)
    target = configurator.build()
    rows, cols = plan.req_to_token_shape
    limit = snap.schedule.max_running_requests
    memory = EngineMemory(
        page_size=plan.page_size,
        max_total_tokens=plan.max_total_num_tokens,
        max_running_requests=min(int(limit), rows - 1) if limit else min(rows - 1, DEFAULT_MAX_RUNNING),
        max_context_len=cols,
        req_to_token_pool=target.req_to_token_pool,
        kv_pool=target.kv_pool,
        allocator=target.allocator,
        spec_algorithm=algorithm,
        plan=plan,
    )
    if draft_cfg is not None:
        draft = KVCacheConfigurator(
            target_shape, budget, is_draft_worker=True, target=target, draft_shape=draft_mshape, snapshot=snap
        ).build()
        memory.draft_shape = draft_mshape
        memory.draft_kv_pool = draft.kv_pool
    return memory
