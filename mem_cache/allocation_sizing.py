"""How many KV slots a decode step takes, and how much headroom a request row needs.

Every function takes the draft-token bound as keyword-only `max_draft_tokens` (0 without
speculative decoding). Callers read it once, from `max_speculative_num_draft_tokens()`,
and pass the same value everywhere, so the req-to-token row headroom and the
speculative buffers can never be sized from two different readings.
"""

from __future__ import annotations

# Slots past the last token a request row keeps free without speculative decoding.
BASE_EXTRA_CONTEXT_LEN = 4


def _spec_on(num_steps: int | None, max_draft_tokens: int) -> bool:
    return max_draft_tokens > 0 and bool(num_steps)


def get_alloc_len_per_decode(page_size: int, num_steps: int | None, topk: int | None, *, max_draft_tokens: int) -> int:
    """KV slots one request takes per decode step.

    1 without speculation; `max(steps*topk, Dt)` when page_size or topk is 1; otherwise
    each of the topk branches rounds its `steps` new tokens (after a partly used page) up
    to whole pages: `max(ceil((P-1+steps)/P)*P*topk, Dt)`.
    """
    if not _spec_on(num_steps, max_draft_tokens):
        return 1
    steps, k = int(num_steps or 0), int(topk or 1)
    if page_size == 1 or k == 1:
        return max(steps * k, max_draft_tokens)
    pages = -(-(page_size - 1 + steps) // page_size)
    return max(pages * page_size * k, max_draft_tokens)


def get_alloc_reserve_per_decode(
    page_size: int, num_steps: int | None, topk: int | None, *, max_draft_tokens: int
) -> int:
    """Slots reserved per request for decode: two steps in flight (overlap scheduling)."""
    return 2 * get_alloc_len_per_decode(page_size, num_steps, topk, max_draft_tokens=max_draft_tokens)


def get_req_to_token_extra_context_len(
    page_size: int, num_steps: int | None, topk: int | None, *, max_draft_tokens: int
) -> int:
    """Columns a req-to-token row holds past `context_len`.

    4 without speculation; with it `max(4 + Dt, reserve + P - 1)`, so a request at
    `context_len - 1` tokens can still write a whole page-aligned verify allocation.
    """
    if not _spec_on(num_steps, max_draft_tokens):
        return BASE_EXTRA_CONTEXT_LEN
    reserve = get_alloc_reserve_per_decode(page_size, num_steps, topk, max_draft_tokens=max_draft_tokens)
    return max(BASE_EXTRA_CONTEXT_LEN + max_draft_tokens, reserve + page_size - 1)


__all__ = [
    "BASE_EXTRA_CONTEXT_LEN",
    "get_alloc_len_per_decode",
    "get_alloc_reserve_per_decode",
    "get_req_to_token_extra_context_len",
]
