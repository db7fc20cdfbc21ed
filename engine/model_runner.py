"""The model runner: one model, its KV pool and allocator, and the attention backend over them.

It is the `ModelRunnerLike` surface attention backends read (`attention.runner`), plus
the one operation the scheduler needs: run a ragged batch of new tokens through the
model and return their logits. A draft worker is a second runner over its own pool that
shares the target's allocator and request table (DESIGN.md section 5: draft workers
reuse the target's plan and allocator).
"""

from __future__ import annotations

from typing import Any

import torch

from attention.forward_batch import ForwardBatch
from engine.model import TinyTransformer
from mem_cache.model_shape import ModelShape


class ModelRunner:
    """Holds what a backend reads and runs forwards; the pool may be swapped (backends re-resolve)."""

    def __init__(
        self,
        model: TinyTransformer,
        *,
        token_to_kv_pool: Any,
        token_to_kv_pool_allocator: Any,
        req_to_token_pool: Any,
        backend_factory: Any,
        is_draft_worker: bool = False,
        spec_algorithm: str | None = None,
        device: str = "cpu",
    ) -> None:
        self.model = model
        self.model_shape: ModelShape = model.shape
        self.token_to_kv_pool = token_to_kv_pool
        self.token_to_kv_pool_allocator = token_to_kv_pool_allocator
        self.req_to_token_pool = req_to_token_pool
        self.is_draft_worker = is_draft_worker
        self.spec_algorithm = spec_algorithm
        self.device = device
        self.backend = backend_factory(self)

    def forward(self, batch: ForwardBatch, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Logits `[new_tokens, vocab]` for the batch's new tokens; writes their K/V into the pool."""
        backend = self.backend
        backend.init_forward_metadata(batch)

        def attend(layer_id: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            out = backend.forward(q, k, v, layer_id, batch)
            return out.reshape(out.shape[0], -1)

        return self.model(ids, positions, attend)
