"""A unit of work's items as scheduler requests: each prompt checked, the texts tokenized in one call, a `Req` each.

`Engine.submit` and `Engine.submit_batch` come here with checked sampling and options;
the requests are queued by the engine, all or none.
"""

from __future__ import annotations

import queue
from collections.abc import Sequence
from typing import Any

from engine.request_params import RequestOptions, SamplingParams, prompt_of
from engine.request_state import Req
from engine.tokenizer import encode_many


def new_requests(
    scheduler: Any,
    tokenizer: Any,
    items: Sequence[tuple[str | Sequence[int], SamplingParams]],
    *,
    vocab: int,
    seed: int,
    timeout_s: float,
    options: RequestOptions,
) -> list[Req]:
    """A request per item, in order; the first refusal is raised, as building one item after the other would.

    Each prompt is refused as over HTTP before the tokenizer sees it (ids also against
    `vocab`, the model's vocabulary); the texts are then tokenized in one call. `seed`
    is the server's, for items that ask none.
    """
    prompts: list[str | tuple[int, ...]] = []
    refused: Exception | None = None
    for prompt_or_ids, _ in items:
        try:
            prompts.append(prompt_of(prompt_or_ids, vocab=vocab))
        except Exception as exc:  # raised after the items before it, which may be refused first
            refused = exc
            break
    texts = [p for p in prompts if isinstance(p, str)]
    encoded = iter(encode_many(tokenizer, texts, add_special_tokens=options.add_special_tokens))
    own = options.timeout_s is not None  # the client chose the deadline, not 'request_timeout_s'
    reqs = []
    for prompt, (_, sampling) in zip(prompts, items, strict=False):
        ids = next(encoded) if isinstance(prompt, str) else list(prompt)
        item_seed = seed if sampling.seed is None else sampling.seed
        req = scheduler.new_request(ids, params=sampling, seed=item_seed, timeout_s=timeout_s, own_deadline=own)
        if options.stream:
            req.stream = queue.SimpleQueue()
        reqs.append(req)
    if refused is not None:
        raise refused
    return reqs


__all__ = ["new_requests"]
