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


REQUEST_OPS = st.lists(
    st.tuples(st.sampled_from(["extend", "decode", "free", "free_swa"]), st.integers(0, 9), st.integers(1, 11)),
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(ops=REQUEST_OPS, page=st.sampled_from([1, 4]), swa=st.booleans())
def test_random_request_sequences(ops: list[tuple[str, int, int]], page: int, swa: bool) -> None:
    """Extends, decodes and frees of whole requests keep slots unique, off page 0, page-contiguous, and mapped."""
    size = 64
    a: PagedTokenToKVPoolAllocator | SWATokenToKVPoolAllocator = (
        SWATokenToKVPoolAllocator(size, 40, page) if swa else PagedTokenToKVPoolAllocator(size, page)
    )
    start = a.available_size()
    reqs: list[list[int]] = []
    for op, pick, n in ops:
        free_before = a.available_size()
        if op == "extend":
            grow = reqs[pick % len(reqs)] if reqs and pick % 2 else None
            prefix = len(grow) if grow else 0
            got = a.alloc_extend([prefix], [prefix + n], [grow[-1] if grow else -1])
            new_pages = -(-(prefix + n) // page) - -(-prefix // page)
            if got is None:
                assert new_pages * page > free_before
                continue
            assert a.available_size() == free_before - new_pages * page
            if grow is None:
                reqs.append(got.tolist())
            else:
                grow.extend(got.tolist())
        elif op == "decode" and reqs:
            batch = reqs[: pick % len(reqs) + 1]
            got = a.alloc_decode([len(r) + 1 for r in batch], [r[-1] for r in batch])
            if got is None:
                assert sum(len(r) % page == 0 for r in batch) * page > free_before
                continue
            for r, slot in zip(batch, got.tolist(), strict=True):
                r.append(slot)
        elif op == "free" and reqs:
            a.free(reqs.pop(pick % len(reqs)))
        elif op == "free_swa" and reqs and swa:
            r = reqs[pick % len(reqs)]
            assert isinstance(a, SWATokenToKVPoolAllocator)
            a.free_swa(r[: (len(r) - 1) // page * page])  # pages the window has left, never the last token's
        live = [s for r in reqs for s in r]
        assert len(set(live)) == len(live) and min(live, default=page) >= page
        assert all(s % page == i % page for r in reqs for i, s in enumerate(r))
        assert bool(a.is_live(live).all()) if live else True
        if isinstance(a, SWATokenToKVPoolAllocator):
            _check_swa_map(a, set(live))
            mapped = a.translate_loc_from_full_to_swa(torch.tensor(live, dtype=torch.int64)).tolist()
            assert all(m == 0 or m % page == s % page for s, m in zip(live, mapped, strict=True))
    for r in reqs:
        a.free(r)
    assert a.available_size() == start


def test_decode_from_an_unallocated_slot_is_refused() -> None:
    """A continuing request whose last slot is in page 0 raises and takes nothing, instead of handing out slot 1."""
    a = PagedTokenToKVPoolAllocator(64, 4)
    before = a.available_size()
    with pytest.raises(ValueError, match=r"request 1 continues a page from slot 0, which is not an allocated slot"):
        a.alloc_decode([1, 2], [-1, 0])
    assert a.available_size() == before and a.alloc(4).tolist() == [4, 5, 6, 7]


def test_swa_decode_after_the_window_page_was_freed_is_refused() -> None:
    """Decoding onto a page whose SWA side was freed raises and leaves both sides as they were."""
    pool = SWAKVPool(32, 16, 4, torch.float32, 1, 2, None, [0], [1])
    a = SWATokenToKVPoolAllocator(32, 16, 4, pool)
    full = a.alloc_extend([0], [6], [-1])
    a.free_swa(full)  # wrongly includes the last token's page
    sizes = (a.full_available_size(), a.swa_available_size())
    with pytest.raises(ValueError, match=r"request 0 continues a page from sliding-window slot 0"):
        a.alloc_decode([7], [9])
    with pytest.raises(ValueError, match="continues a page whose sliding-window side was freed"):
        a.alloc_extend([6], [8], [9])
    assert (a.full_available_size(), a.swa_available_size()) == sizes == (24, 16)


def test_free_of_whole_pages_in_any_order() -> None:
    """Freeing slots out of order and several per page frees each page once; a repeat raises naming the page."""
    a = PagedTokenToKVPoolAllocator(32, 4)
    got = a.alloc_extend([0, 0], [6, 3], [-1, -1])
    assert got.tolist() == [4, 5, 6, 7, 8, 9, 12, 13, 14]
    a.free(got.flip(0))
    assert a.available_size() == 32
    with pytest.raises(DoubleFreeError, match=r"page 3 \(slots 12..15\) is not allocated"):
        a.free([13])
