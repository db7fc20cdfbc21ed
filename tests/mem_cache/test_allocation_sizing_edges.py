"""The on/off edges of speculative allocation sizing and each term of its formulas, by hand."""

from __future__ import annotations

import pytest

from mem_cache.allocation_sizing import (
    get_alloc_len_per_decode,
    get_alloc_reserve_per_decode,
    get_req_to_token_extra_context_len,
)

# (page, steps, topk, Dt) -> (alloc_len, extra): alloc_len is 1 without speculation (Dt 0 or
# no steps); max(steps*k, Dt) at page 1 or k 1 (topk None counts as 1); otherwise
# max(ceil((page-1+steps)/page)*page*k, Dt). extra is 4 without speculation, else
# max(4 + Dt, 2*alloc_len + page - 1).
EDGES = {
    # speculation off: no draft tokens although steps are set, or no steps although Dt is
    (1, 3, 1, 0): (1, 4),
    (16, 3, 4, 0): (1, 4),
    (1, None, None, 4): (1, 4),
    (1, 0, 2, 4): (1, 4),
    # one draft token is enough to switch it on: max(3*1, 1) = 3, extra max(5, 6 + 0)
    (1, 3, 1, 1): (3, 6),
    # topk None is a chain of one: max(3*1, 4) = 4; extra max(8, 8 + 0) and max(8, 8 + 15)
    (1, 3, None, 4): (4, 8),
    (16, 3, None, 4): (4, 23),
    # page 1 with a tree: steps*topk = 12 beats Dt 8; extra max(12, 24 + 0)
    (1, 3, 4, 8): (12, 24),
    # page 2, topk 2: ceil((1+3)/2) = 2 pages a branch -> 2*2*2 = 8; extra max(8, 16 + 1)
    (2, 3, 2, 4): (8, 17),
    # page 4: ceil((3+2)/4) = 2 pages -> 16 (and ceil((2+2)/4) = 1 would be 8); extra max(7, 32 + 3)
    (4, 2, 2, 3): (16, 35),
    # page 4, one step: ceil((3+1)/4) = 1 page -> 8; extra max(7, 16 + 3)
    (4, 1, 2, 3): (8, 19),
    # an exact multiple: ceil((3+5)/4) = 2 pages -> 16; extra max(7, 35)
    (4, 5, 2, 3): (16, 35),
    # the capacity bound beats the page-aligned branches: max(8, 20) = 20; extra max(24, 40 + 3)
    (4, 1, 2, 20): (20, 43),
    # and 4 + Dt beats the reserve: page 1, chain of 2 steps, Dt 10: max(2, 10) = 10; extra max(14, 20)
    (1, 2, 1, 10): (10, 20),
}


@pytest.mark.parametrize(("page", "steps", "topk", "dt"), sorted(EDGES, key=str))
def test_edges(page: int, steps: int | None, topk: int | None, dt: int) -> None:
    """Each edge gives its hand-computed size, as an int, and the reserve is twice the per-decode length."""
    alloc_len, extra = EDGES[page, steps, topk, dt]
    got_len = get_alloc_len_per_decode(page, steps, topk, max_draft_tokens=dt)
    got_reserve = get_alloc_reserve_per_decode(page, steps, topk, max_draft_tokens=dt)
    got_extra = get_req_to_token_extra_context_len(page, steps, topk, max_draft_tokens=dt)
    assert (got_len, got_reserve, got_extra) == (alloc_len, 2 * alloc_len, extra)
    assert type(got_len) is int and type(got_reserve) is int and type(got_extra) is int
