"""Per-request sampling parameters and the one function that draws a token with them.

Both the scheduler's decode step and the speculative verifier call `sample`, so a
draft is accepted exactly when the target would have drawn the same token; greedy
(a temperature below `GREEDY_TEMPERATURE`, or `top_k=1`) is an argmax, with no generator involved, so it stays
exact. Penalties are applied to the logits before anything else, as the usual runtimes
do: `repetition_penalty` divides positive and multiplies negative logits of every token
seen (prompt and output), `frequency_penalty` subtracts per occurrence in the output,
`presence_penalty` once per distinct output token.

Every value the request model accepts must sample, even where float32 cannot hold it:
a penalised logit is kept within float32's finite range (a repetition_penalty of 1e-300
is 0 in float32, and a logit divided by it would be inf, then NaN after the shift), and
the nucleus always keeps the most likely token (a top_p of 1e-300 times the mass is 0,
which would drop every token).
"""

from __future__ import annotations

from typing import Any

import torch

from engine.request_params import SamplingParams


def unpenalised(p: SamplingParams) -> bool:
    """Whether `p` leaves the logits as the model gave them."""
    return p.repetition_penalty == 1.0 and p.frequency_penalty == 0.0 and p.presence_penalty == 0.0


def penalised(logits: torch.Tensor, p: SamplingParams, prompt: list[int], output: list[int]) -> torch.Tensor:
    """The logits after the repetition, frequency and presence penalties."""
    if unpenalised(p):
        return logits
    out = logits.float().clone()
    if p.repetition_penalty != 1.0:
        seen = torch.tensor(sorted(set(prompt) | set(output)), dtype=torch.long)
        vals = out[seen]
        finite = torch.finfo(out.dtype).max
        penalty = torch.where(vals > 0, vals / p.repetition_penalty, vals * p.repetition_penalty)
        out[seen] = penalty.clamp(-finite, finite)
    if output and (p.frequency_penalty or p.presence_penalty):
        counts = torch.bincount(torch.tensor(output, dtype=torch.long), minlength=out.shape[-1]).float()
        out = out - p.frequency_penalty * counts - p.presence_penalty * (counts > 0).float()
    return out


def sample(logits: torch.Tensor, req: Any) -> int:
    """One token for `req` (its `params`, `prompt`, `output` and seeded `generator`)."""
    p: SamplingParams = req.params
    logits = penalised(logits, p, req.prompt, req.output)
    if p.greedy:
        return int(torch.argmax(logits))
    # shift first: at a tiny temperature the division would overflow to inf and softmax to NaN
    shifted = logits.float() - logits.float().max()
    probs = torch.softmax(shifted / p.temperature, dim=-1)
    if p.top_k > 1 and p.top_k < probs.shape[-1]:
        kth = torch.topk(probs, p.top_k).values[-1]
        probs = torch.where(probs >= kth, probs, torch.zeros_like(probs))
    if p.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs  # mass of the tokens ranked above
        drop = before >= p.top_p * sorted_probs.sum()
        drop[0] = False  # the most likely token is always in the nucleus, however small top_p
        sorted_probs[drop] = 0.0
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    if p.min_p > 0.0:
        probs = torch.where(probs >= p.min_p * probs.max(), probs, torch.zeros_like(probs))
    return int(torch.multinomial(probs, 1, generator=req.generator))


def plain_argmax_rows(reqs: list[Any]) -> list[int]:
    """Indexes of the requests whose token is the argmax of their unchanged logits.

    Their rows are drawn in one `argmax` over the batch (`sample` would give each the same
    token, one tensor call a request); in a step that carries a batch of greedy requests the
    per-request calls were a large part of the step.
    """
    return [i for i, req in enumerate(reqs) if req.params.greedy and unpenalised(req.params)]


__all__ = ["SamplingParams", "penalised", "plain_argmax_rows", "sample", "unpenalised"]
