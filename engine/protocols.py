"""The engine's collaborators as `Protocol`s: what the scheduler needs from each, and nothing more.

The scheduler is written against these, not against the concrete runner, draft worker
or HiCache bridge, so a test can hand it a small fake and a new runner only has to
offer these members.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import torch

from attention.forward_batch import ForwardBatch
from mem_cache.allocator import PagedKVAllocator
from mem_cache.model_shape import ModelShape
from mem_cache.pools import KVPool, ReqToTokenPool

if TYPE_CHECKING:
    from engine.request_state import Req

# The scheduler (`engine.scheduler.Scheduler`) is typed against these protocols, so they take it as Any:
# naming its class here would tie the two modules in a circle.
Scheduler = Any


class Runner(Protocol):
    """Runs the model on a batch over its pools; `token_to_kv_pool` is the active pool."""

    model_shape: ModelShape
    token_to_kv_pool: KVPool
    token_to_kv_pool_allocator: PagedKVAllocator
    req_to_token_pool: ReqToTokenPool

    def forward(self, batch: ForwardBatch, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor: ...


class DraftWorker(Protocol):
    """Speculative decoding: drafts with its own runner, verifies with the target's, inside one step."""

    @property
    def draft(self) -> Runner: ...

    @property
    def tokens_per_step(self) -> int: ...

    def step(self, sched: Scheduler) -> None: ...

    def draft_extend(
        self, batch: ForwardBatch, ids: torch.Tensor, positions: torch.Tensor, reqs: list[Req]
    ) -> None: ...


class HostCache(Protocol):
    """The HiCache tiers behind the prefix cache: load matched pages, back finished ones up."""

    def start_prefetch(self, ids: list[int]) -> None: ...

    def load_prefix(self, ids: list[int], matched: int, limit: int, sched: Scheduler) -> int: ...

    def backup_prefix(self, ids: list[int], sched: Scheduler) -> None: ...

    def backup_pages(self, ids: list[int], slots: torch.Tensor, start: int) -> None: ...


__all__ = ["DraftWorker", "HostCache", "Runner"]
