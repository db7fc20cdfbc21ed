"""What a finished request gives its caller: the tokens, the text (cut at its stop strings) and what it cost.

A request that ended on a stop string ran the tokens that spelled it, but its answer
is cut before it: the text, and the token ids with it (those the cut text needs), so a
client reading `output_ids` gets the same answer as one reading `text`, streamed or
not. `completion_tokens` still counts every token the request ran.
"""

from __future__ import annotations

import time
from typing import Any

import attrs

from engine.request_state import Req
from engine.streaming import cut_at_stop


@attrs.frozen(slots=True)
class GenerateStats:
    """What one request cost and reused."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    prefetched_tokens: int
    retractions: int
    spec_verify_steps: int
    spec_accept_length: float | None
    latency_s: float
    time_to_first_token_s: float | None
    finish_reason: str


@attrs.frozen(slots=True)
class GenerateResult:
    token_ids: tuple[int, ...]
    text: str
    stats: GenerateStats


def result_of(req: Req, tokenizer: Any, *, speculative: bool) -> GenerateResult:
    """The result of a finished request; the text and its token ids end before its first stop string."""
    end = req.finished_at or time.perf_counter()
    stats = GenerateStats(
        prompt_tokens=len(req.prompt),
        completion_tokens=len(req.output),
        cached_tokens=req.cached_tokens,
        prefetched_tokens=req.prefetched_tokens,
        retractions=req.retractions,
        spec_verify_steps=req.spec_steps,
        spec_accept_length=(req.spec_emitted / req.spec_steps if req.spec_steps else None) if speculative else None,
        latency_s=end - req.submitted,
        time_to_first_token_s=None if req.first_token_at is None else req.first_token_at - req.submitted,
        finish_reason=req.finish_reason or "length",
    )
    text, stopped = cut_at_stop(tokenizer.decode(req.output), req.params.stop)
    ids = req.output[: tokens_spelling(text, req.output, tokenizer)] if stopped else req.output
    return GenerateResult(tuple(ids), text, stats)


def tokens_spelling(text: str, ids: list[int], tokenizer: Any) -> int:
    """How many of `ids` it takes to spell `text`, a prefix of their decoding: the fewest whose decoding starts with it.

    A token that holds both the end of `text` and the start of the stop string is kept
    (the text needs it). A binary search: a prefix of tokens decodes to a prefix of the
    text, so the answer takes a few decodes, not one per token of a long output.
    """
    low, high = 0, len(ids)  # decode(ids[:high]) starts with text; the answer is in [low, high]
    while low < high:
        mid = (low + high) // 2
        if tokenizer.decode(ids[:mid]).startswith(text):
            high = mid
        else:
            low = mid + 1
    return high


__all__ = ["GenerateResult", "GenerateStats", "result_of", "tokens_spelling"]
