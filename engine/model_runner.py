"""The model runner: one model, its KV pool and allocator, and the attention backend over them.

It is the `ModelRunnerLike` surface attention backends read (`attention.runner`), plus
the one operation the scheduler needs: run a ragged batch of new tokens through the
model and return their logits. A draft worker is a second runner over its own pool that
shares the target's allocator and request table (DESIGN.md section 5: draft workers
reuse the target's plan and allocator).

With `enable_torch_compile` (hot, read at every forward) the model's forward runs
through `torch.compile`, one compiled function per config fingerprint: an override of
any counted field gets a fresh compile instead of a graph that may have baked in the
old value (dynamo guards would catch most, but the fingerprint is the contract). The
last few are kept, so switching back and forth does not recompile every time. The
attention call goes through the backend's Python bookkeeping over the pools, so it runs
eagerly (`torch.compiler.disable`) and dynamo compiles the dense parts around it.
"""

from __future__ import annotations

import collections
from typing import Any

import torch

from attention.forward_batch import ForwardBatch
from attention.runner import SimpleRunner
from engine.model import TinyTransformer
from mem_cache.model_shape import ModelShape

COMPILED_KEPT = 4


class _KeyedBackend:
    """A torch.compile backend tagged with the config fingerprint it compiles for."""

    def __init__(self, backend: Any, fingerprint: str) -> None:
        self.fingerprint = fingerprint
        self._backend = backend

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        if isinstance(self._backend, str):
            from torch._dynamo import lookup_backend

            return lookup_backend(self._backend)(gm, example_inputs)
        return self._backend(gm, example_inputs)

    def __repr__(self) -> str:
        return f"<compile backend {self._backend!r} for config {self.fingerprint[:12]}>"


class ModelRunner(SimpleRunner):
    """The runner surface a backend reads (`SimpleRunner`) plus the model and its forwards.

    The pool may be swapped (`swap_pool`; backends re-resolve).
    """

    model_shape: ModelShape

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
        compile_backend: Any = "inductor",
    ) -> None:
        super().__init__(
            token_to_kv_pool,
            token_to_kv_pool_allocator,
            req_to_token_pool,
            model.shape,
            is_draft_worker,
            spec_algorithm,
            device,
        )
        self.model = model
        self.backend = backend_factory(self)
        self.compile_backend = compile_backend
        self._compiled: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self.compiles = 0  # compiled functions built so far (one per fingerprint seen with compile on)
        self.compiled_forwards = 0  # forwards that ran through a compiled function

    def _forward_fn(self) -> Any:
        """The eager model, or the compiled one for the current fingerprint (built on first use)."""
        from runtime.context import get_context
        from runtime.serving import get_exec

        if not get_exec().graph.enable_torch_compile:
            return self.model
        key = get_context().fingerprint()
        fn = self._compiled.get(key)
        if fn is None:
            # a backend object of its own per fingerprint: dynamo keys its cache on the backend,
            # so graphs traced under another config are never reused for this one
            fn = torch.compile(self.model, backend=_KeyedBackend(self.compile_backend, key), dynamic=True)
            self.compiles += 1
            self._compiled[key] = fn
            while len(self._compiled) > COMPILED_KEPT:
                self._compiled.popitem(last=False)
        else:
            self._compiled.move_to_end(key)
        self.compiled_forwards += 1
        return fn

    def forward(self, batch: ForwardBatch, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Logits `[new_tokens, vocab]` for the batch's new tokens; writes their K/V into the pool."""
        backend = self.backend
        backend.init_forward_metadata(batch)

        def attend(layer_id: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            out = backend.forward(q, k, v, layer_id, batch)
            return out.reshape(out.shape[0], -1)

        fn = self._forward_fn()
        if fn is self.model:
            return fn(ids, positions, attend)
        # paged attention is Python bookkeeping over the pools: run it eagerly between the graphs
        return fn(ids, positions, torch.compiler.disable(attend))
