"""Allocation sizing tables and the req-to-token row headroom at the end of a context."""

from __future__ import annotations

import pytest
import torch

from mem_cache.allocation_sizing import (
    get_alloc_len_per_decode,
    get_alloc_reserve_per_decode,
    get_req_to_token_extra_context_len,
)
from mem_cache.pools import ReqToTokenPool

# (page, topk, steps) -> alloc_len_per_decode with Dt = steps*topk + 1, worked out by hand:
# page 1 or topk 1: max(steps*topk, Dt) = Dt; otherwise ceil((page-1+steps)/page)*page*topk.
ALLOC_LEN = {
    (1, 1, 1): 2,
    (1, 1, 3): 4,
    (1, 1, 5): 6,
    (1, 4, 1): 5,
    (1, 4, 3): 13,
    (1, 4, 5): 21,
    (16, 1, 1): 2,
    (16, 1, 3): 4,
    (16, 1, 5): 6,
    (16, 4, 1): 64,
    (16, 4, 3): 128,
    (16, 4, 5): 128,
    (64, 1, 1): 2,
    (64, 1, 3): 4,
    (64, 1, 5): 6,
    (64, 4, 1): 256,
    (64, 4, 3): 512,
    (64, 4, 5): 512,
}
# extra = max(4 + Dt, 2*alloc_len + page - 1)
EXTRA = {
    (1, 1, 1): 6,
    (1, 1, 3): 8,
    (1, 1, 5): 12,
    (1, 4, 1): 10,
    (1, 4, 3): 26,
    (1, 4, 5): 42,
    (16, 1, 1): 19,
    (16, 1, 3): 23,
    (16, 1, 5): 27,
    (16, 4, 1): 143,
    (16, 4, 3): 271,
    (16, 4, 5): 271,
    (64, 1, 1): 67,
    (64, 1, 3): 71,
    (64, 1, 5): 75,
    (64, 4, 1): 575,
    (64, 4, 3): 1087,
    (64, 4, 5): 1087,
}


@pytest.mark.parametrize(("page", "topk", "steps"), sorted(ALLOC_LEN))
def test_sizing_table(page: int, topk: int, steps: int) -> None:
    """Each formula gives the hand-computed value for every page size, topk and step count."""
    dt = steps * topk + 1
    assert get_alloc_len_per_decode(page, steps, topk, max_draft_tokens=dt) == ALLOC_LEN[page, topk, steps]
    assert get_alloc_reserve_per_decode(page, steps, topk, max_draft_tokens=dt) == 2 * ALLOC_LEN[page, topk, steps]
    assert get_req_to_token_extra_context_len(page, steps, topk, max_draft_tokens=dt) == EXTRA[page, topk, steps]


def test_without_speculation() -> None:
    """Without speculative decoding a decode takes one slot and rows keep 4 spare columns."""
    assert get_alloc_len_per_decode(16, None, None, max_draft_tokens=0) == 1
    assert get_alloc_reserve_per_decode(16, None, None, max_draft_tokens=0) == 2
    assert get_req_to_token_extra_context_len(16, None, None, max_draft_tokens=0) == 4


def test_capacity_bound_wins_over_steps() -> None:
    """A larger draft-token capacity raises the per-decode allocation and the headroom with it."""
    assert get_alloc_len_per_decode(1, 3, 1, max_draft_tokens=10) == 10
    assert get_req_to_token_extra_context_len(1, 3, 1, max_draft_tokens=10) == 20


@pytest.mark.parametrize(("page", "topk", "steps"), sorted(ALLOC_LEN))
def test_verify_allocation_stays_in_its_row(page: int, topk: int, steps: int) -> None:
    """A request at context_len - 1 tokens writes its page-aligned verify and reserve slots inside its own row."""
    context_len, dt = 100, steps * topk + 1
    extra = get_req_to_token_extra_context_len(page, steps, topk, max_draft_tokens=dt)
    reserve = get_alloc_reserve_per_decode(page, steps, topk, max_draft_tokens=dt)
    pool = ReqToTokenPool(3, context_len + extra)
    row, neighbour = pool.alloc(2)
    pool.req_to_token[neighbour].fill_(-7)
    seq_len = context_len - 1
    end = -(-(seq_len + reserve) // page) * page  # the allocation ends on a page boundary
    positions = torch.arange(seq_len, max(end, seq_len + dt))
    flat = pool.req_to_token.view(-1)  # write like a kernel does: by flat offset, no bounds per row
    flat[row * pool.max_context_len + positions] = 1
    assert bool((pool.req_to_token[neighbour] == -7).all())
    assert int(pool.req_to_token[row].sum()) == positions.numel()
