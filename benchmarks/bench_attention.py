"""Decode attention over a paged KV pool vs scaled_dot_product_attention on the same K/V.

Batch 32, context 2048 (the new token included), grouped-query heads. The paged side is
the whole `torch_native` decode call: per-batch metadata (SWA resolution, table check),
the K/V write into the pool, the gather through req-to-token and the attention. The
baselines run `torch.nn.functional.scaled_dot_product_attention` on K/V that were
gathered once beforehand (pure attention: the floor, since paged decode must also copy
every key and value once), and on K/V gathered by plain indexing into fresh tensors
inside the timed call (the straightforward paged decode). All cases run interleaved in
one process; only ratios are printed as results.

    .venv/bin/python benchmarks/bench_attention.py
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F

from attention import AttentionLayer, ForwardBatch, SimpleRunner, TorchNativeBackend
from mem_cache.allocator import TokenToKVPoolAllocator
from mem_cache.pools import MHATokenToKVPool, ReqToTokenPool

BATCH, CONTEXT = 32, 2048
Q_HEADS, KV_HEADS, HEAD_DIM = 16, 4, 64
ROUNDS = 10


def build() -> tuple[TorchNativeBackend, ForwardBatch, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    size = BATCH * CONTEXT
    pool = MHATokenToKVPool(size, 1, torch.float32, KV_HEADS, HEAD_DIM, layer_ids=(0,))
    allocator = TokenToKVPoolAllocator(size, kvcache=pool)
    table = ReqToTokenPool(BATCH, CONTEXT)
    # Scatter every request over the pool, as a long-running server's free list would.
    slots = allocator.alloc(size)
    assert slots is not None
    slots = slots[torch.randperm(size, generator=gen)].view(BATCH, CONTEXT)
    rows = table.alloc(BATCH)
    assert rows is not None
    for r, s in zip(rows, slots, strict=True):
        table.write(r, 0, s)
    prefix = slots[:, :-1].reshape(-1)
    pool.set_kv_buffer(
        0,
        prefix,
        torch.randn(prefix.numel(), KV_HEADS, HEAD_DIM, generator=gen),
        torch.randn(prefix.numel(), KV_HEADS, HEAD_DIM, generator=gen),
    )
    runner = SimpleRunner(pool, allocator, table, None)
    batch = ForwardBatch.decode(req_pool_indices=rows, seq_lens=[CONTEXT] * BATCH, out_cache_loc=slots[:, -1])
    q = torch.randn(BATCH, Q_HEADS, HEAD_DIM, generator=gen)
    k = torch.randn(BATCH, KV_HEADS, HEAD_DIM, generator=gen)
    v = torch.randn(BATCH, KV_HEADS, HEAD_DIM, generator=gen)
    return TorchNativeBackend(runner), batch, q, k, v, slots


def main() -> None:
    backend, batch, q, k, v, slots = build()
    pool = backend.runner.token_to_kv_pool
    layer = AttentionLayer(0)

    def paged() -> torch.Tensor:
        backend.init_forward_metadata(batch)
        return backend.forward_decode(q, k, v, layer, batch)

    def gather() -> tuple[torch.Tensor, torch.Tensor]:
        return (pool.get_key_buffer(0)[slots].transpose(1, 2), pool.get_value_buffer(0)[slots].transpose(1, 2))

    paged()  # writes the new token, so the gathered K/V below hold it too
    kg, vg = (t.contiguous() for t in gather())

    def sdpa() -> torch.Tensor:
        return F.scaled_dot_product_attention(q[:, :, None], kg, vg, enable_gqa=True)[:, :, 0]

    def gather_sdpa() -> torch.Tensor:
        kk, vv = gather()
        return F.scaled_dot_product_attention(q[:, :, None], kk, vv, enable_gqa=True)[:, :, 0]

    err = float((paged() - sdpa()).abs().max())
    assert err < 1e-4, f"paged decode and sdpa disagree by {err}"
    cases = {"paged": paged, "sdpa": sdpa, "gather+sdpa": gather_sdpa}
    times: dict[str, list[float]] = {name: [] for name in cases}
    for fn in cases.values():
        fn()
    for _ in range(ROUNDS):  # interleaved, so machine load hits every case alike
        for name, fn in cases.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    med = {name: statistics.median(t) for name, t in times.items()}
    print(
        f"decode attention, batch {BATCH}, context {CONTEXT}, heads {Q_HEADS}/{KV_HEADS}x{HEAD_DIM}, "
        f"float32, {torch.get_num_threads()} threads, max |diff| {err:.1e}"
    )
    print(f"paged torch_native / sdpa on pre-gathered K/V : {med['paged'] / med['sdpa']:.2f}x")
    print(f"paged torch_native / gather + sdpa            : {med['paged'] / med['gather+sdpa']:.2f}x")


if __name__ == "__main__":
    main()
