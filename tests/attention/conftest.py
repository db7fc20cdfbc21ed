"""Shared set-up for the attention tests: real pools, real allocators, a dense float64 oracle.

`World` drives requests through prefix/extend/decode steps the way a scheduler would:
it allocates slots with the real allocator, writes them into the real req-to-token
table, calls the backend for every layer of every runner, and keeps each request's
K/V history per (runner, layer) in float64 to compute the dense reference attention.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pytest
import torch

from attention import ForwardBatch, SimpleRunner, TorchNativeBackend
from mem_cache.allocator import PagedTokenToKVPoolAllocator, SWATokenToKVPoolAllocator
from mem_cache.model_shape import ModelShape, model_shape_from_config
from mem_cache.pools import MHATokenToKVPool, ReqToTokenPool, SWAKVPool

WINDOW = 8
Q_HEADS, KV_HEADS, HEAD_DIM = 4, 2, 16
FULL_SIZE, SWA_SIZE = 512, 256
SLIDING, FULL = "sliding_attention", "full_attention"


def shape_of(layer_types: Sequence[str], window: int | None = WINDOW) -> ModelShape:
    config: dict[str, Any] = {
        "num_hidden_layers": len(layer_types),
        "hidden_size": Q_HEADS * HEAD_DIM,
        "intermediate_size": 32,
        "num_attention_heads": Q_HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "vocab_size": 16,
        "layer_types": list(layer_types),
    }
    if window is not None:
        config["sliding_window"] = window
    return model_shape_from_config(config)


def dense_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_start: int, window: int | None
) -> torch.Tensor:
    """Float64 causal (and windowed) GQA attention over a whole sequence, no pool involved."""
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) / q.shape[-1] ** 0.5
    qpos = torch.arange(q.shape[0])[:, None] + q_start
    kpos = torch.arange(k.shape[0])[None, :]
    mask = kpos <= qpos
    if window is not None:
        mask &= (qpos - kpos) < window
    scores = scores.masked_fill(~mask[None], float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).abs().max() / ref.abs().max())


@attrs.define
class Req:
    row: int
    slots: list[int] = attrs.Factory(list)
    swa_freed: int = 0


@attrs.define
class Attached:
    name: str
    runner: SimpleRunner
    backend: Any
    history: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = attrs.Factory(dict)


class World:
    """A target runner (hybrid SWA or full-only) and optional draft runners sharing its allocator."""

    shape_of = staticmethod(shape_of)
    dense_reference = staticmethod(dense_reference)
    rel_error = staticmethod(rel_error)

    def __init__(self, page_size: int, *, hybrid: bool, seed: int = 0, evict: bool = True) -> None:
        self.page_size = page_size
        self.evict = evict
        self.hybrid = hybrid
        self.gen = torch.Generator().manual_seed(seed)
        self.req_to_token = ReqToTokenPool(8, 256)
        if hybrid:
            shape = shape_of([SLIDING, FULL, SLIDING, FULL])
            pool: Any = SWAKVPool(
                FULL_SIZE,
                SWA_SIZE,
                page_size,
                torch.float32,
                KV_HEADS,
                HEAD_DIM,
                swa_attention_layer_ids=shape.swa_attention_layer_ids,
                full_attention_layer_ids=shape.full_attention_layer_ids,
            )
            self.allocator: Any = SWATokenToKVPoolAllocator(FULL_SIZE, SWA_SIZE, page_size, kvcache=pool)
        else:
            shape = shape_of([FULL] * 4, window=None)
            pool = MHATokenToKVPool(FULL_SIZE, page_size, torch.float32, KV_HEADS, HEAD_DIM, layer_ids=range(4))
            self.allocator = PagedTokenToKVPoolAllocator(FULL_SIZE, page_size, kvcache=pool)
        self.target = self.attach("target", pool, shape)
        self.runners = [self.target]
        self.reqs: list[Req] = []
        self.errors: list[float] = []

    def attach(self, name: str, pool: Any, shape: ModelShape, *, algorithm: str | None = None) -> Attached:
        runner = SimpleRunner(
            pool,
            self.allocator,
            self.req_to_token,
            shape,
            is_draft_worker=name != "target",
            spec_algorithm=algorithm,
        )
        return Attached(name, runner, TorchNativeBackend(runner))

    def add_draft(self, shape: ModelShape, *, algorithm: str = "EAGLE") -> Attached:
        """A draft worker with its own full-capacity, full-only pool over the target's allocator."""
        pool = MHATokenToKVPool(
            FULL_SIZE, self.page_size, torch.float32, KV_HEADS, HEAD_DIM, layer_ids=range(shape.num_hidden_layers)
        )
        draft = self.attach("draft", pool, shape, algorithm=algorithm)
        self.runners.append(draft)
        return draft

    def new_requests(self, n: int) -> list[Req]:
        rows = self.req_to_token.alloc(n)
        assert rows is not None
        reqs = [Req(r) for r in rows]
        self.reqs.extend(reqs)
        return reqs

    # -- steps ---------------------------------------------------------------------------

    def extend(self, reqs: Sequence[Req], new_tokens: Sequence[int]) -> ForwardBatch:
        prefix = [len(r.slots) for r in reqs]
        seq = [p + n for p, n in zip(prefix, new_tokens, strict=True)]
        last = [r.slots[-1] if r.slots else -1 for r in reqs]
        locs = self.allocator.alloc_extend(prefix, seq, last)
        assert locs is not None
        batch = ForwardBatch.extend(
            req_pool_indices=[r.row for r in reqs], seq_lens=seq, extend_prefix_lens=prefix, out_cache_loc=locs
        )
        self._run(reqs, locs, batch)
        return batch

    def decode(self, reqs: Sequence[Req]) -> ForwardBatch:
        seq = [len(r.slots) + 1 for r in reqs]
        locs = self.allocator.alloc_decode(seq, [r.slots[-1] for r in reqs])
        assert locs is not None
        batch = ForwardBatch.decode(req_pool_indices=[r.row for r in reqs], seq_lens=seq, out_cache_loc=locs)
        self._run(reqs, locs, batch)
        return batch

    def _run(self, reqs: Sequence[Req], locs: torch.Tensor, batch: ForwardBatch) -> None:
        offset = 0
        for r, p, s in zip(reqs, batch.prefix_lens_cpu, batch.seq_lens_cpu, strict=True):
            new = locs[offset : offset + s - p]
            self.req_to_token.write(r.row, p, new)
            r.slots.extend(int(x) for x in new)
            offset += s - p
        for att in self.runners:
            att.backend.init_forward_metadata(batch)
            for layer_id in range(att.runner.model_shape.num_hidden_layers):
                self.run_layer(att, reqs, batch, layer_id)
        self.evict_swa()

    def randn(self, *shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=self.gen, dtype=torch.float32)

    def run_layer(self, att: Attached, reqs: Sequence[Req], batch: ForwardBatch, layer_id: int) -> torch.Tensor:
        n = batch.num_new_tokens
        q, k, v = self.randn(n, Q_HEADS, HEAD_DIM), self.randn(n, KV_HEADS, HEAD_DIM), self.randn(n, KV_HEADS, HEAD_DIM)
        out = att.backend.forward(q, k, v, layer_id, batch)
        window = att.runner.model_shape.window_of(layer_id)
        offset = 0
        for r, p, s in zip(reqs, batch.prefix_lens_cpu, batch.seq_lens_cpu, strict=True):
            sl = slice(offset, offset + s - p)
            old_k, old_v = att.history.get((r.row, layer_id), (k[:0].double(), v[:0].double()))
            hk, hv = torch.cat([old_k, k[sl].double()]), torch.cat([old_v, v[sl].double()])
            att.history[(r.row, layer_id)] = (hk, hv)
            ref = dense_reference(q[sl], hk, hv, p, window)
            self.errors.append(rel_error(out[sl], ref))
            offset += s - p
        return out

    def evict_swa(self) -> None:
        """Free the SWA side of every page no later query can see, as a scheduler does."""
        if not (self.hybrid and self.evict):
            return
        for r in self.reqs:
            dead = len(r.slots) - WINDOW + 1  # the next query (position len) sees keys >= len - W + 1
            upto = max(0, dead) // self.page_size * self.page_size
            if upto > r.swa_freed:
                self.allocator.free_swa(r.slots[r.swa_freed : upto])
                r.swa_freed = upto


@pytest.fixture
def make_world() -> Callable[..., World]:
    return World
