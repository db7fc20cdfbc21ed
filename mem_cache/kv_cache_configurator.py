"""The KV-cache configurator: plan from one config snapshot, then build the pools and allocator.

All config comes from one `get_context().snapshot()` (or the snapshot passed in), read
once into `PlanInputs`; the draft-token bound is read once, through
`max_speculative_num_draft_tokens(snap)`, and that single value sizes both the
req-to-token row headroom and every speculative allowance. Re-planning after an override
(of the speculative settings, or `max_mamba_cache_size` from a mamba pool) takes a new
snapshot and so reflects it.

Draft workers reuse the target's plan, request table and allocator and only add the
draft's KV pool. Which pool a draft depth gets is decided from the model's metadata
(`is_hybrid_swa_mtp_draft`, `draft_swa_full_capacity`), never from an architecture name.
"""

from __future__ import annotations

from typing import Any

import attrs
import structlog
import torch

from mem_cache.allocator import (
    PagedTokenToKVPoolAllocator,
    SWATokenToKVPoolAllocator,
    TokenToKVPoolAllocator,
)
from mem_cache.errors import PlanError
from mem_cache.model_shape import (
    ModelShape,
    draft_swa_full_capacity,
    is_hybrid_swa_mtp_draft,
    model_shape_from_config,
)
from mem_cache.pool_configurator import (
    LayerCosts,
    MemoryPoolConfig,
    PlanInputs,
    PoolConfigurator,
    choose_pool_configurator,
)
from mem_cache.pools import KVPool, MHATokenToKVPool, ReqToTokenPool, SWAKVPool
from runtime import get_context, max_speculative_num_draft_tokens
from sgconf.errors import Problem

log = structlog.get_logger("mem_cache.kv_cache")


@attrs.frozen(slots=True)
class KVBudget:
    """The bytes the KV cache of one rank may use, where that number came from, and the flag that raises it.

    `flag` is None when the budget is measured device memory times mem_fraction_static:
    a plan that does not fit then names the fraction that would.
    """

    bytes: int
    source: str
    flag: str | None = None


def plan_inputs(snap: Any, shape: ModelShape) -> PlanInputs:
    """Every value a plan needs, from one snapshot; the draft-token bound is read exactly once."""
    model, sched, spec, disagg = snap.model, snap.schedule, snap.spec, snap.disagg
    context_len = model.context_length or shape.max_position_embeddings
    if context_len is None:
        raise PlanError(
            "the context length is unknown: the model config has no max_position_embeddings -- pass --context-length"
        )
    algorithm = spec.speculative_algorithm
    return PlanInputs(
        page_size=int(sched.page_size or 1),
        kv_cache_dtype=_dtype_name(model.kv_cache_dtype, model.dtype, shape),
        context_len=int(context_len),
        swa_full_tokens_ratio=float(sched.swa_full_tokens_ratio if sched.swa_full_tokens_ratio is not None else 0.8),
        mem_fraction_static=float(sched.mem_fraction_static or 0.8),
        max_total_tokens=sched.max_total_tokens,
        max_running_requests=sched.max_running_requests,
        chunked_prefill_size=sched.chunked_prefill_size,
        disable_radix_cache=bool(snap.memory.disable_radix_cache),
        disable_hybrid_swa_memory=bool(sched.disable_hybrid_swa_memory),
        speculative_algorithm=algorithm,
        num_steps=spec.speculative_num_steps if algorithm else None,
        topk=spec.speculative_eagle_topk if algorithm else None,
        max_draft_tokens=int(max_speculative_num_draft_tokens(snap)) if algorithm else 0,
        disaggregation_mode=disagg.disaggregation_mode,
        decode_extra_slots=int(disagg.disaggregation_decode_extra_slots),
    )


def _dtype_name(kv_dtype: str, dtype: str, shape: ModelShape) -> str:
    if kv_dtype != "auto":
        return kv_dtype
    return dtype if dtype != "auto" else shape.torch_dtype


def draft_shape_from_snapshot(snap: Any, shape: ModelShape) -> ModelShape:
    """The draft model's shape: its config when the spec bag names one, else the target's MTP layers."""
    spec = snap.spec
    if spec.speculative_draft_model_config is None and spec.speculative_draft_model_path is None:
        return shape.mtp_draft_shape()
    from sgconf.serving.models import load_model_config

    cfg = load_model_config(spec.speculative_draft_model_path or "", spec.speculative_draft_model_config)
    return model_shape_from_config(cfg, name="draft")


def device_of(snap: Any) -> str:
    """The torch device this worker runs on: `cuda:<base_gpu_id>` on cuda, else the device name."""
    dev = str(snap.device.device)
    return f"cuda:{int(snap.device.base_gpu_id)}" if dev == "cuda" else dev


def kv_budget(snap: Any, device: str | None = None) -> KVBudget:
    """The KV budget `sgconf plan` and `sgconf serve` both size the pools for, from one snapshot.

    `kv_cache_memory_bytes` when set (on cpu resolution sets it: nothing is measured
    there); otherwise the free memory of the cuda device, measured now, times
    mem_fraction_static. Raises PlanError when the budget would have to be measured on a
    device this machine does not have.
    """
    from sgconf.serving import field_info

    sched = snap.schedule
    if sched.kv_cache_memory_bytes is not None:
        return KVBudget(
            int(sched.kv_cache_memory_bytes), "kv_cache_memory_bytes", field_info("kv_cache_memory_bytes").flag
        )
    dev = str(device or device_of(snap))
    if not (dev.startswith("cuda") and torch.cuda.is_available()):
        info = field_info("kv_cache_memory_bytes")
        msg = (
            f"the KV budget is {dev} memory times mem_fraction_static, and no {dev} memory can be measured on this "
            f"machine -- set {info.flag} (e.g. {24 << 30} for 24GiB)"
        )
        raise PlanError([Problem(info.path, msg)], header="no device memory to size the KV cache from")
    assert sched.mem_fraction_static is not None, "mem_fraction_static was not resolved"
    fraction = float(sched.mem_fraction_static)
    free, _ = torch.cuda.mem_get_info(torch.device(dev))
    return KVBudget(int(free * fraction), f"free {dev} memory {free:,} bytes times mem_fraction_static {fraction}")


def default_available_bytes(snap: Any, device: str | None = None) -> int:
    """The bytes of `kv_budget(snap, device)`."""
    return kv_budget(snap, device).bytes


@attrs.define(slots=True)
class KVCacheMemory:
    """What a configurator built: the plan, request table, KV pool(s) and allocator.

    A draft worker's memory shares `req_to_token_pool`, `allocator` and `plan` with its
    target's and has its own `kv_pool`. Full-capacity draft depths share one identity map,
    kept on the target as `draft_identity_map`; the draft that made it owns (and counts) it.
    """

    plan: MemoryPoolConfig
    req_to_token_pool: ReqToTokenPool
    kv_pool: KVPool
    allocator: Any
    is_draft_worker: bool = False
    draft_model_idx: int | None = None
    max_mamba_cache_size: int | None = None
    owns_index_map: bool = False
    draft_identity_map: torch.Tensor | None = None

    @property
    def max_total_num_tokens(self) -> int:
        return self.plan.max_total_num_tokens

    @property
    def max_num_reqs(self) -> int:
        return self.plan.max_num_reqs

    def nbytes(self) -> int:
        """Bytes of this worker's own tensors (a draft worker: its KV pool only)."""
        own = self.kv_pool.nbytes()
        if isinstance(self.kv_pool, SWAKVPool) and self.owns_index_map:
            own += self.kv_pool.full_to_swa_index_mapping.nbytes
        if not self.is_draft_worker:
            own += self.req_to_token_pool.nbytes()
        return own


class KVCacheConfigurator:
    """Plans and builds the KV cache for one worker.

    `shape` is the target model; `available_bytes` the bytes the KV cache may use (None:
    `kv_budget(snapshot)`, what `sgconf plan` and `sgconf serve` use). `budget_flag` names
    the flag that set the budget explicitly (e.g. `--available-memory`), so a plan that
    does not fit asks for a larger budget there; None means the budget scales with
    mem_fraction_static, which is then the fix named. A draft worker (`is_draft_worker=True`) needs the target's
    `KVCacheMemory` as `target`; `draft_model_idx` names one draft depth (None: all).
    """

    def __init__(
        self,
        shape: ModelShape,
        available_bytes: int | None = None,
        *,
        is_draft_worker: bool = False,
        draft_model_idx: int | None = None,
        draft_shape: ModelShape | None = None,
        target: KVCacheMemory | None = None,
        device: str | torch.device | None = None,
        snapshot: Any = None,
        budget_flag: str | None = None,
    ) -> None:
        if is_draft_worker and target is None:
            raise ValueError("a draft worker reuses its target's plan and allocator -- pass target=")
        snap: Any = snapshot if snapshot is not None else get_context().snapshot()  # bags by attribute, per schema
        self.snap = snap
        # plans, pools and bytes are per attention rank: each holds its share of the KV heads
        self.tp_size = int(self.snap.parallel.attn_tp_size)
        self.model_shape = shape
        shape = shape.per_rank(self.tp_size)
        if draft_shape is not None:
            draft_shape = draft_shape.per_rank(self.tp_size)
        self.shape = shape
        self.inputs = plan_inputs(self.snap, shape)
        self.device = torch.device(device if device is not None else device_of(self.snap))
        if available_bytes is None:
            self.budget = kv_budget(self.snap, str(self.device))
            if budget_flag is not None:  # the spelling the budget was given in (`--available-memory`)
                self.budget = attrs.evolve(self.budget, flag=budget_flag)
        else:
            self.budget = KVBudget(int(available_bytes), "given by the caller", budget_flag)
        self.available_bytes = self.budget.bytes
        self.budget_flag = self.budget.flag
        self.is_draft_worker = is_draft_worker
        self.draft_model_idx = draft_model_idx
        self.target = target
        self.draft_shape = draft_shape
        if self.draft_shape is None and self.inputs.has_draft_kv:
            self.draft_shape = draft_shape_from_snapshot(self.snap, self.model_shape).per_rank(self.tp_size)
        self.costs = LayerCosts.of(shape, self.draft_shape, self.inputs)
        self.pool_configurator: PoolConfigurator = choose_pool_configurator(shape, self.inputs)(
            shape, self.costs, self.inputs
        )

    # ---- plan ---------------------------------------------------------------------------
    def plan(self) -> MemoryPoolConfig:
        """The memory plan (no tensors); a draft worker returns its target's."""
        if self.target is not None and self.is_draft_worker:
            return self.target.plan
        plan = self.pool_configurator.plan(self.available_bytes, budget_flag=self.budget_flag)
        return attrs.evolve(
            plan,
            tp_size=self.tp_size,
            kv_heads_per_rank=self.shape.num_key_value_heads,
            kv_heads_total=self.model_shape.num_key_value_heads,
            budget_source=self.budget.source,
        )

    # ---- build --------------------------------------------------------------------------
    def build(self) -> KVCacheMemory:
        """Plan, then allocate the request table, KV pool(s) and allocator (draft: its KV pool only)."""
        if self.is_draft_worker:
            return self._build_draft()
        plan = self.plan()
        i, page, dev = self.inputs, plan.page_size, self.device
        rows, cols = plan.req_to_token_shape
        req_pool = ReqToTokenPool(rows - 1, cols, dev)
        full, swa = plan.full_max_total_num_tokens, plan.swa_max_total_num_tokens
        shape = self.shape
        pool: KVPool
        if not plan.uses_swa_pool:
            pool = MHATokenToKVPool(
                full,
                page,
                i.kv_cache_dtype,
                shape.num_key_value_heads,
                shape.head_dim,
                shape.v_head_dim,
                range(shape.num_hidden_layers),
                dev,
            )
            allocator: Any = (
                TokenToKVPoolAllocator(full, pool, dev)
                if page == 1
                else PagedTokenToKVPoolAllocator(full, page, pool, dev)
            )
        elif plan.costs.F == 0:  # all-SWA: one pool of swa tokens, addressed through an identity map
            pool = self._swa_pool(swa, swa, identity=True)
            allocator = PagedTokenToKVPoolAllocator(swa, page, pool, dev)
        else:
            pool = self._swa_pool(full, swa, identity=False)
            allocator = SWATokenToKVPoolAllocator(full, swa, page, pool, dev)
        mamba = self.snap.exec.mamba.max_mamba_cache_size
        log.info(
            "kv_cache.built",
            configurator=plan.configurator,
            max_total_num_tokens=plan.max_total_num_tokens,
            full_tokens=full,
            swa_tokens=swa,
            max_num_reqs=plan.max_num_reqs,
            total_bytes=plan.total_bytes,
            budget_bytes=plan.budget_bytes,
        )
        return KVCacheMemory(
            plan, req_pool, pool, allocator, max_mamba_cache_size=mamba, owns_index_map=plan.uses_swa_pool
        )

    def _swa_pool(self, full: int, swa: int, *, identity: bool) -> SWAKVPool:
        s = self.shape
        return SWAKVPool(
            full,
            swa,
            self.inputs.page_size,
            self.inputs.kv_cache_dtype,
            s.num_key_value_heads,
            s.head_dim,
            s.v_head_dim,
            s.swa_attention_layer_ids,
            s.full_attention_layer_ids,
            self.device,
            swa_head_num=s.swa_num_key_value_heads,
            swa_head_dim=s.swa_head_dim,
            swa_v_head_dim=s.swa_v_head_dim,
            identity_map=identity,
        )

    def _build_draft(self) -> KVCacheMemory:
        target = self.target
        assert target is not None
        draft = self.draft_shape or self.shape.mtp_draft_shape()
        plan, page, dev, dtype = target.plan, target.plan.page_size, self.device, self.inputs.kv_cache_dtype
        idx = self.draft_model_idx
        if idx is not None and not 0 <= idx < draft.num_hidden_layers:
            raise ValueError(f"draft_model_idx {idx} is outside the draft's {draft.num_hidden_layers} layers")
        layers = tuple(range(draft.num_hidden_layers)) if idx is None else (idx,)
        swa_layers = tuple(i for i in layers if i in draft.swa_attention_layer_ids) if plan.uses_swa_pool else ()
        full_layers = tuple(i for i in layers if i not in swa_layers)
        target_pool = target.kv_pool
        full_size = plan.full_max_total_num_tokens if plan.costs.F else plan.swa_max_total_num_tokens
        d = draft
        no_hybrid = self.inputs.disable_hybrid_swa_memory

        def swa_pool(size_swa: int, *, identity: bool, mapping: torch.Tensor | None) -> SWAKVPool:
            return SWAKVPool(
                full_size,
                size_swa,
                page,
                dtype,
                d.num_key_value_heads,
                d.head_dim,
                d.v_head_dim,
                swa_layers,
                full_layers,
                dev,
                swa_head_num=d.swa_num_key_value_heads,
                swa_head_dim=d.swa_head_dim,
                swa_v_head_dim=d.swa_v_head_dim,
                identity_map=identity,
                index_mapping=mapping,
            )

        full_capacity = draft_swa_full_capacity(
            self.shape, draft, is_draft_worker=True, draft_model_idx=idx, disable_hybrid_swa_memory=no_hybrid
        )
        pool: KVPool
        owns_map = False
        if not swa_layers:
            # a full-only draft (e.g. EAGLE3 on an SWA target): a plain pool at the target's full slots
            pool = MHATokenToKVPool(
                full_size, page, dtype, d.num_key_value_heads, d.head_dim, d.v_head_dim, full_layers, dev
            )
            kind = "mha"
        elif plan.costs.Dsf and (idx is None or full_capacity):
            # banded MTP depths: a full-capacity SWA ring, slots equal full slots. The identity
            # map is read-only, so every depth (one pool for all, or one worker per depth)
            # shares the first one built; the plan budgets exactly one.
            shared = target.draft_identity_map
            pool = swa_pool(full_size, identity=True, mapping=shared)
            if shared is None:
                target.draft_identity_map = pool.full_to_swa_index_mapping
                owns_map = True
            kind = "swa_full_capacity"
        else:
            # SWA draft layers share the target's window pool size and its full-to-SWA map
            assert isinstance(target_pool, SWAKVPool)
            pool = swa_pool(target_pool.size_swa, identity=False, mapping=target_pool.full_to_swa_index_mapping)
            kind = "swa_shared_map"
        log.info(
            "kv_cache.draft_built",
            pool=kind,
            draft_model_idx=idx,
            hybrid_swa_mtp_draft=is_hybrid_swa_mtp_draft(
                self.shape, is_draft_worker=True, draft_model_idx=idx, disable_hybrid_swa_memory=no_hybrid
            ),
            layers=list(layers),
        )
        return KVCacheMemory(
            plan,
            target.req_to_token_pool,
            pool,
            target.allocator,
            is_draft_worker=True,
            draft_model_idx=idx,
            max_mamba_cache_size=target.max_mamba_cache_size,
            owns_index_map=owns_map,
        )


def configure_kv_cache(shape: ModelShape, available_bytes: int | None = None, **options: Any) -> KVCacheMemory:
    """Plan and build in one call from the live context's snapshot; `options` are KVCacheConfigurator's."""
    return KVCacheConfigurator(shape, available_bytes, **options).build()


__all__ = [
    "KVBudget",
    "KVCacheConfigurator",
    "KVCacheMemory",
    "configure_kv_cache",
    "default_available_bytes",
    "draft_shape_from_snapshot",
    "kv_budget",
    "plan_inputs",
]
