"""Allocators: exact placement, errors, and random alloc/free sequences (hypothesis)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mem_cache.allocator import (
    PagedTokenToKVPoolAllocator,
    SWATokenToKVPoolAllocator,
    TokenToKVPoolAllocator,
)
from mem_cache.errors import DoubleFreeError, ForeignIndexError
from mem_cache.pools import SWAKVPool


def test_token_allocator_hands_out_from_one_and_returns_none_when_full() -> None:
    """Slots start at 1; an allocation beyond capacity returns None and takes nothing."""
    a = TokenToKVPoolAllocator(8)
    assert a.alloc(3).tolist() == [1, 2, 3]
    assert a.alloc(6) is None
    assert a.available_size() == 5


def test_double_free_and_foreign_index_are_detected() -> None:
    """Freeing a free slot, the same slot twice, slot 0 or a slot past the pool raises and frees nothing."""
    a = TokenToKVPoolAllocator(8)
    got = a.alloc(2)
    with pytest.raises(DoubleFreeError, match="slot 1 is freed twice in one call"):
        a.free([1, 1])
    with pytest.raises(ForeignIndexError, match=r"slot 0 is not in this allocator \(slots 1..8; page 0 is reserved\)"):
        a.free([0])
    with pytest.raises(ForeignIndexError):
        a.free([9])
    assert a.available_size() == 6
    a.free(got)
    with pytest.raises(DoubleFreeError, match="slot 1 is not allocated"):
        a.free([1])


def test_paged_extend_fills_the_last_page_first() -> None:
    """alloc_extend continues a partly used page, then takes whole new pages."""
    a = PagedTokenToKVPoolAllocator(64, 4)
    first = a.alloc_extend([0, 0], [5, 3], [-1, -1])
    assert first.tolist() == [4, 5, 6, 7, 8, 12, 13, 14]
    more = a.alloc_extend([5, 3], [9, 4], [8, 14])
    assert more.tolist() == [9, 10, 11, 16, 15]
    dec = a.alloc_decode([10, 5], [16, 15])
    assert dec.tolist() == [17, 20]
    assert a.available_size() == 64 - 5 * 4


def test_paged_alloc_needs_whole_pages() -> None:
    """alloc(need) refuses a count that is not a multiple of the page size."""
    with pytest.raises(ValueError, match="multiple of page_size 4, got 3"):
        PagedTokenToKVPoolAllocator(64, 4).alloc(3)


def test_swa_allocator_maps_both_sides_and_free_swa_keeps_full() -> None:
    """The SWA allocator writes the pool's map; free_swa clears only the window side."""
    pool = SWAKVPool(32, 16, 4, torch.float32, 1, 2, None, [0], [1])
    a = SWATokenToKVPoolAllocator(32, 16, 4, pool)
    full = a.alloc_extend([0], [6], [-1])
    assert full.tolist() == [4, 5, 6, 7, 8, 9]
    assert pool.translate_loc_from_full_to_swa(full).tolist() == [4, 5, 6, 7, 8, 9]
    a.free_swa(full[:4])
    assert pool.translate_loc_from_full_to_swa(full).tolist() == [0, 0, 0, 0, 8, 9]
    assert (a.full_available_size(), a.swa_available_size(), a.available_size()) == (24, 12, 12)
    a.free(full)
    assert (a.full_available_size(), a.swa_available_size()) == (32, 16)
    assert int(pool.full_to_swa_index_mapping[-1]) == -1


def _check_swa_map(a: SWATokenToKVPoolAllocator, live: set[int]) -> None:
    mapping = a.full_to_swa_index_mapping
    swa_seen: set[int] = set()
    for slot in range(mapping.numel() - 1):
        target = int(mapping[slot])
        if slot not in live:
            assert target == 0
        elif target:
            assert bool(a.swa_attn_allocator.is_live([target]))
            assert target not in swa_seen
            swa_seen.add(target)
    assert int(mapping[-1]) == -1


OPS = st.lists(st.tuples(st.sampled_from(["alloc", "free", "free_swa"]), st.integers(0, 12)), max_size=25)


@settings(max_examples=40, deadline=None)
@given(ops=OPS, page=st.sampled_from([1, 4]), swa=st.booleans())
def test_random_alloc_free_sequences(ops: list[tuple[str, int]], page: int, swa: bool) -> None:
    """No slot is handed out twice or from page 0, the SWA map stays consistent, and freeing all restores capacity."""
    size = 48
    if swa:
        a = SWATokenToKVPoolAllocator(size, 24, page)
    elif page == 1:
        a = TokenToKVPoolAllocator(size)
    else:
        a = PagedTokenToKVPoolAllocator(size, page)
    start = a.available_size()
    groups: list[list[int]] = []
    live: set[int] = set()
    for op, n in ops:
        if op == "alloc":
            got = a.alloc(n * page)
            if got is None:
                assert n * page > a.available_size()
                continue
            slots = got.tolist()
            assert not set(slots) & live and min(slots, default=page) >= page and len(set(slots)) == len(slots)
            live.update(slots)
            groups.append(slots)
        elif groups:
            slots = groups[n % len(groups)]
            if op == "free":
                groups.remove(slots)
                a.free(slots)
                live.difference_update(slots)
            elif swa:
                a.free_swa(slots)
        if swa:
            _check_swa_map(a, live)
    for slots in groups:
        a.free(slots)
    assert a.available_size() == start
