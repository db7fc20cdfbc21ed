"""Building an engine's parts from one config snapshot: pools, model and runner, caches, scheduler, draft worker.

A mixin of `engine.engine.Engine`: every method runs once, in `Engine.__init__`, under
the engine's own context, and sets the attributes the loop and the public API use.
"""

from __future__ import annotations

import threading
from typing import Any

import structlog
import torch

from attention import create_attention_backend
from engine.boundary import StepBoundary
from engine.capacity import PlannedCapacity
from engine.checkpoint import build_model, draft_model
from engine.hicache_bridge import HiCacheBridge
from engine.memory import build_memory
from engine.model import TinyTransformer, torch_dtype
from engine.model_runner import ModelRunner
from engine.scheduler import Scheduler, SchedulerLimits, swa_window
from engine.speculative import SpeculativeWorker
from mem_cache.pools import KVPool
from mem_cache.prefix_cache import PrefixCache
from runtime.serving import attention_backends, max_speculative_num_draft_tokens

log = structlog.get_logger("engine.engine")


class EngineBuilding:
    """The building half of `Engine` (see the module docstring)."""

    shape: Any
    seed: int
    device: str
    context: Any
    weights_source: Any
    checkpoint: Any
    eos_token_ids: tuple[int, ...]
    clock: Any
    tokenizer: Any
    scheduler: Scheduler
    _wake: Any
    _compile_backend: Any

    def _startup_summary(self, snap: Any) -> dict[str, Any]:
        """One line an operator reads at start-up: model, pools, tokens, backends and storage."""
        prefill, decode = attention_backends(snap)
        pools = type(self.memory.kv_pool).__name__
        if self.memory.draft_kv_pool is not None:
            pools += f"+draft {type(self.memory.draft_kv_pool).__name__}"
        swa = getattr(self.memory.kv_pool, "size_swa", None)
        mem = snap.memory
        host = "off" if self.hicache is None else "host tier"
        return {
            "model": snap.model.model_path if snap.model.model_config is None else snap.model.model_config,
            "layers": self.shape.num_hidden_layers,
            "weights": self.weights_source.reason,
            "pools": pools,
            "kv_tokens": self.memory.max_total_tokens,
            **({"swa_tokens": int(swa)} if swa is not None else {}),
            "page_size": self.memory.page_size,
            "max_running_requests": self.memory.max_running_requests,
            "attention": prefill if prefill == decode else f"{prefill}/{decode}",
            "speculative": snap.spec.speculative_algorithm,
            "hicache": host if mem.hicache_storage_backend is None else f"{host}+{mem.hicache_storage_backend}",
            "device": self.device,
            "cpu_threads": snap.device.cpu_threads,
        }

    def _build_model(self, snap: Any) -> None:
        """Plan and build the pools, then the model, its runner and the draft worker on them."""
        torch.set_num_threads(int(snap.device.cpu_threads))  # process-wide: an engine is its process's model
        self.memory = build_memory(snap, self.shape)
        dtype = torch_dtype(snap.model.dtype)
        self.model = build_model(self.checkpoint, self.shape, dtype=dtype, device=self.device, seed=self.seed)
        self.runner = self._make_runner(self.model, self.memory.kv_pool, is_draft=False)
        self.speculative = self._make_speculative(snap, dtype)

    def _build_caches(self, snap: Any) -> None:
        """The prefix cache (unless the radix cache is off) and the HiCache tiers behind it."""
        self.prefix_cache: PrefixCache | None = None
        self.hicache: HiCacheBridge | None = None
        if snap.memory.disable_radix_cache:
            return
        window = swa_window(self.runner, self.speculative)
        allocator = self.memory.allocator
        self.prefix_cache = PrefixCache(
            self.memory.page_size, free=allocator.free, window=window, free_swa=getattr(allocator, "free_swa", None)
        )
        if snap.memory.enable_hierarchical_cache:
            self.hicache = HiCacheBridge.create(self, snap)

    def _build_scheduler(self, snap: Any) -> Scheduler:
        # resolution always decides the chunk size, so a None here is a bug, not user input
        assert snap.schedule.chunked_prefill_size is not None, "chunked_prefill_size was not resolved"
        limits = SchedulerLimits(
            max_running_requests=self.memory.max_running_requests,
            chunked_prefill_size=snap.schedule.chunked_prefill_size,
            max_prefill_tokens=int(snap.schedule.max_prefill_tokens),
            page_size=self.memory.page_size,
            max_context_len=self.memory.max_context_len,
            eos_token_id=self.shape.eos_token_id,
            eos_token_ids=self.eos_token_ids,
            context_length=snap.model.context_length,
        )
        return Scheduler(
            self.runner,
            limits,
            prefix_cache=self.prefix_cache,
            speculative=self.speculative,
            hicache=self.hicache,
            settings=self.context.snapshot,
            seed=self.seed,
            clock=self.clock,
            decode=self.tokenizer.decode,
        )

    def _build_live_config(self, snap: Any) -> None:
        """What applies config changes while the engine runs: the planned capacity and the step boundary."""
        spec = self.speculative is not None
        self.capacity = PlannedCapacity(
            max_running_requests=self.scheduler.limits.max_running_requests,
            chunked_prefill_size=self.scheduler.limits.chunked_prefill_size,
            speculative_num_steps=self.speculative.max_steps if self.speculative is not None else None,
            speculative_num_draft_tokens=max_speculative_num_draft_tokens(snap) if spec else None,
            speculative_eagle_topk=int(snap.spec.speculative_eagle_topk or 1) if spec else None,
        )
        self.boundary = StepBoundary(self._wake, self.scheduler)
        self._apply_lock = threading.Lock()
        self._stepping = False

    def _make_runner(self, model: TinyTransformer, pool: KVPool | None, *, is_draft: bool) -> ModelRunner:
        return ModelRunner(
            model,
            token_to_kv_pool=pool,
            token_to_kv_pool_allocator=self.memory.allocator,
            req_to_token_pool=self.memory.req_to_token_pool,
            backend_factory=create_attention_backend,
            is_draft_worker=is_draft,
            spec_algorithm=self.memory.spec_algorithm,
            device=self.device,
            compile_backend=self._compile_backend,
        )

    def _make_speculative(self, snap: Any, dtype: torch.dtype) -> SpeculativeWorker | None:
        if snap.spec.speculative_algorithm is None:
            return None
        assert self.memory.draft_shape is not None, "a speculative algorithm was resolved without a draft shape"
        draft = draft_model(
            snap, self.memory.draft_shape, self.checkpoint, dtype=dtype, device=self.device, seed=self.seed
        )
        draft_runner = self._make_runner(draft, self.memory.draft_kv_pool, is_draft=True)
        topk = snap.spec.speculative_eagle_topk
        if topk is not None and topk > 1:
            log.warning("speculative.single_chain", speculative_eagle_topk=topk, drafted_topk=1)
        steps = snap.spec.speculative_num_steps
        assert steps is not None, "speculative_num_steps was not resolved"  # resolution decides it with the algorithm
        return SpeculativeWorker(
            self.runner,
            draft_runner,
            num_steps=int(steps),
            algorithm=snap.spec.speculative_algorithm,
        )


__all__ = ["EngineBuilding"]
