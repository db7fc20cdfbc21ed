"""Per-request sampling parameters and the one function that draws a token with them.

Both the scheduler's decode step and the speculative verifier call `sample`, so a
draft is accepted exactly when the target would have drawn the same token; greedy
(temperature 0 or `top_k=1`) is an argmax, with no generator involved, so it stays
exact. Penalties are applied to the logits before anything else, as the usual runtimes
do: `repetition_penalty` divides positive and multiplies negative logits of every token
seen (prompt and output), `frequency_penalty` subtracts per occurrence in the output,
`presence_penalty` once per distinct output token.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch

from engine.errors import RequestRejected


@attrs.frozen(slots=True)
class SamplingParams:
    """How one request samples; the defaults sample the full distribution without penalties."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    stop_token_ids: tuple[int, ...] = ()

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0 or self.top_k == 1

    def check(self) -> SamplingParams:
        """Return self; raises RequestRejected naming the first parameter out of range."""
        rules: list[tuple[str, Any, bool, str]] = [
            ("temperature", self.temperature, self.temperature >= 0, ">= 0"),
            ("top_p", self.top_p, 0 < self.top_p <= 1, "in (0, 1]"),
            ("top_k", self.top_k, self.top_k == -1 or self.top_k >= 1, "-1 (off) or >= 1"),
            ("min_p", self.min_p, 0 <= self.min_p <= 1, "in [0, 1]"),
            ("repetition_penalty", self.repetition_penalty, self.repetition_penalty > 0, "> 0"),
            ("frequency_penalty", self.frequency_penalty, -2 <= self.frequency_penalty <= 2, "in [-2, 2]"),
            ("presence_penalty", self.presence_penalty, -2 <= self.presence_penalty <= 2, "in [-2, 2]"),
            ("stop_token_ids", self.stop_token_ids, all(t >= 0 for t in self.stop_token_ids), "token ids >= 0"),
        ]
        for name, value, ok, expected in rules:
            if not ok:
                raise RequestRejected(f"'{name}' must be {expected} (got {value!r})")
        return self


def penalised(logits: torch.Tensor, p: SamplingParams, prompt: list[int], output: list[int]) -> torch.Tensor:
    """The logits after the repetition, frequency and presence penalties."""
    if p.repetition_penalty == 1.0 and p.frequency_penalty == 0.0 and p.presence_penalty == 0.0:
        return logits
    out = logits.float().clone()
    if p.repetition_penalty != 1.0:
        seen = torch.tensor(sorted(set(prompt) | set(output)), dtype=torch.long)
        vals = out[seen]
        out[seen] = torch.where(vals > 0, vals / p.repetition_penalty, vals * p.repetition_penalty)
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
        sorted_probs[drop] = 0.0
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    if p.min_p > 0.0:
        probs = torch.where(probs >= p.min_p * probs.max(), probs, torch.zeros_like(probs))
    return int(torch.multinomial(probs, 1, generator=req.generator))


__all__ = ["SamplingParams", "penalised", "sample"]
