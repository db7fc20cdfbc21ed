"""Alloc/free throughput of the paged and SWA allocators against a plain Python free list.

Two patterns: decode-like (batch 256, one token each: alloc_decode then free) and extend
(batch 16 prompts of 512 tokens: alloc_extend then free). Prints tokens/s and the ratio
to a list-based free list measured in the same run; no absolute numbers are asserted.
Batch-256 decode is bound by the fixed cost of ~25 small tensor ops per alloc/free
round; torch's intra-op threads only add wake-up latency at these sizes, so the thread
count is printed with the results.
"""

from __future__ import annotations

import time

import torch

from mem_cache.allocator import PagedTokenToKVPoolAllocator, SWATokenToKVPoolAllocator

SIZE, PAGE, BATCH, ROUNDS = 1 << 16, 16, 256, 200
EXT_BATCH, EXT_LEN, EXT_ROUNDS = 16, 512, 50


REPEATS = 5


def _rate(fn, tokens: int) -> float:
    """Tokens/s of the fastest of REPEATS runs: on a shared machine the minimum is the least disturbed."""
    fn()  # warm up
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return tokens / best


def list_free_list_decode() -> None:
    free = list(range(SIZE, 0, -1))
    for _ in range(ROUNDS):
        got = [free.pop() for _ in range(BATCH)]
        free.extend(got)


def list_free_list_extend() -> None:
    free = list(range(SIZE, 0, -1))
    for _ in range(EXT_ROUNDS):
        got = [free.pop() for _ in range(EXT_BATCH * EXT_LEN)]
        free.extend(got)


def allocator_decode(alloc) -> None:
    # every request starts a page, the worst case for a paged allocator
    seq = torch.full((BATCH,), 1, dtype=torch.int64)
    last = torch.full((BATCH,), -1, dtype=torch.int64)
    for _ in range(ROUNDS):
        got = alloc.alloc_decode(seq, last)
        alloc.free(got)


def allocator_extend(alloc) -> None:
    prefix = torch.zeros(EXT_BATCH, dtype=torch.int64)
    seq = torch.full((EXT_BATCH,), EXT_LEN, dtype=torch.int64)
    last = torch.full((EXT_BATCH,), -1, dtype=torch.int64)
    for _ in range(EXT_ROUNDS):
        got = alloc.alloc_extend(prefix, seq, last)
        alloc.free(got)


def main() -> None:
    base_dec = _rate(list_free_list_decode, ROUNDS * BATCH)
    base_ext = _rate(list_free_list_extend, EXT_ROUNDS * EXT_BATCH * EXT_LEN)
    print(f"torch intra-op threads: {torch.get_num_threads()}")
    print(f"python list free-list: decode {base_dec:,.0f} tok/s, extend {base_ext:,.0f} tok/s")
    for name, make in (
        ("paged", lambda: PagedTokenToKVPoolAllocator(SIZE, PAGE)),
        ("swa", lambda: SWATokenToKVPoolAllocator(SIZE, SIZE // 2, PAGE)),
    ):
        dec = _rate(lambda m=make(): allocator_decode(m), ROUNDS * BATCH)
        ext = _rate(lambda m=make(): allocator_extend(m), EXT_ROUNDS * EXT_BATCH * EXT_LEN)
        print(
            f"{name:5} decode {dec:,.0f} tok/s (x{dec / base_dec:.2f} vs list), extend {ext:,.0f} tok/s (x{ext / base_ext:.2f} vs list)"
        )


if __name__ == "__main__":
    main()
