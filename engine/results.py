"""What a finished request gives its caller: the tokens, the text (cut at its stop strings) and what it cost."""

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
    """The result of a finished request; the text ends before its first stop string."""
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
    text, _ = cut_at_stop(tokenizer.decode(req.output), req.params.stop)
    return GenerateResult(tuple(req.output), text, stats)


__all__ = ["GenerateResult", "GenerateStats", "result_of"]
