"""The SWA pool decision table of DESIGN.md section 6, with real pools and allocators."""

from __future__ import annotations

import pytest
import torch

from attention import (
    SimpleRunner,
    decide_swa_kv_pool,
    resolve_swa_kv_pool,
    translate_out_cache_loc,
    translate_page_table,
)
from mem_cache.allocator import (
    PagedTokenToKVPoolAllocator,
    SWATokenToKVPoolAllocator,
    TokenToKVPoolAllocator,
)
from mem_cache.pools import MHATokenToKVPool, ReqToTokenPool, SWAKVPool


def swa_pool(page_size: int = 1) -> SWAKVPool:
    return SWAKVPool(
        64, 32, page_size, torch.float32, 2, 8, swa_attention_layer_ids=(0, 2), full_attention_layer_ids=(1, 3)
    )


def full_pool(page_size: int = 1) -> MHATokenToKVPool:
    return MHATokenToKVPool(64, page_size, torch.float32, 2, 8, layer_ids=range(4))


def runner(pool, allocator, *, draft: bool = False, algorithm: str | None = None) -> SimpleRunner:
    return SimpleRunner(pool, allocator, ReqToTokenPool(2, 16), None, is_draft_worker=draft, spec_algorithm=algorithm)


def test_active_swa_pool_wins():
    """An SWA active pool is the answer, on a target and on any draft worker."""
    target = swa_pool()
    alloc = SWATokenToKVPoolAllocator(64, 32, kvcache=target)
    assert decide_swa_kv_pool(runner(target, alloc)) == (target, "active_pool_is_swa")
    for algorithm in ("EAGLE", "FROZEN_KV_MTP"):
        assert resolve_swa_kv_pool(runner(target, alloc, draft=True, algorithm=algorithm)) is target
    # judged by the pool's type: an allocator without an SWA pool does not change it
    assert resolve_swa_kv_pool(runner(target, TokenToKVPoolAllocator(64))) is target


def test_target_with_swa_allocator_uses_its_pool():
    """A non-draft worker with a full active pool takes the allocator's SWA pool."""
    shared = swa_pool()
    alloc = SWATokenToKVPoolAllocator(64, 32, kvcache=shared)
    assert decide_swa_kv_pool(runner(full_pool(), alloc)) == (shared, "target_uses_allocator_pool")


def test_target_with_full_allocator_has_no_swa_pool():
    """A non-draft worker whose allocator has no SWA pool gets None."""
    pool = full_pool(4)
    assert decide_swa_kv_pool(runner(pool, PagedTokenToKVPoolAllocator(64, 4, kvcache=pool))) == (None, "no_swa_pool")


@pytest.mark.parametrize("algorithm", ["EAGLE", "EAGLE3", "STANDALONE", "NEXTN", None])
def test_draft_with_full_pool_never_uses_target_map(algorithm):
    """A draft worker with a full-only pool and an SWA allocator gets None (not FROZEN_KV_MTP)."""
    alloc = SWATokenToKVPoolAllocator(64, 32, kvcache=swa_pool())
    assert decide_swa_kv_pool(runner(full_pool(), alloc, draft=True, algorithm=algorithm)) == (
        None,
        "draft_with_full_pool",
    )


def test_frozen_kv_draft_uses_allocator_pool():
    """A FROZEN_KV_MTP draft worker with a full-only pool takes the allocator's SWA pool."""
    shared = swa_pool()
    alloc = SWATokenToKVPoolAllocator(64, 32, kvcache=shared)
    assert decide_swa_kv_pool(runner(full_pool(), alloc, draft=True, algorithm="FROZEN_KV_MTP")) == (
        shared,
        "draft_shares_target_kv",
    )


def test_frozen_kv_draft_without_swa_allocator_pool():
    """A FROZEN_KV_MTP draft worker whose allocator has no SWA pool gets None."""
    pool = full_pool()
    got = decide_swa_kv_pool(
        runner(pool, TokenToKVPoolAllocator(64, kvcache=pool), draft=True, algorithm="FROZEN_KV_MTP")
    )
    assert got == (None, "no_swa_pool")


def test_allocator_type_alone_does_not_count():
    """An SWA allocator that holds no pool gives no SWA pool: only pool types are consulted."""
    assert resolve_swa_kv_pool(runner(full_pool(), SWATokenToKVPoolAllocator(64, 32))) is None


def test_enum_algorithm_names_are_accepted():
    """A speculative algorithm given as an enum member is matched by its name."""
    import enum

    class Algo(enum.Enum):
        FROZEN_KV_MTP = enum.auto()

    shared = swa_pool()
    alloc = SWATokenToKVPoolAllocator(64, 32, kvcache=shared)
    assert resolve_swa_kv_pool(runner(full_pool(), alloc, draft=True, algorithm=Algo.FROZEN_KV_MTP)) is shared


def test_translation_follows_the_allocator_map():
    """out_cache_loc and page tables translate through full_to_swa; freed tokens map to slot 0."""
    pool = swa_pool()
    alloc = SWATokenToKVPoolAllocator(64, 32, kvcache=pool)
    first = alloc.alloc(3)
    second = alloc.alloc(2)
    assert first.tolist() == [1, 2, 3]
    assert translate_out_cache_loc(pool, second).tolist() == [4, 5]
    table = torch.stack([first[:2], second]).to(torch.int32)
    assert translate_page_table(pool, table).tolist() == [[1, 2], [4, 5]]
    alloc.free_swa(first[:1])
    assert translate_out_cache_loc(pool, first).tolist() == [0, 2, 3]
    assert translate_out_cache_loc(pool, torch.tensor([-1])).tolist() == [-1]
