"""Speculative decoding: a draft model proposes tokens, the target verifies them in one forward.

Per decode step and per request (all requests batched together):
1. the draft catches up on tokens it has not seen (accepted tokens of the last step);
2. the draft proposes `num_steps` tokens greedily, one decode forward each;
3. the target runs one extend forward over `[last, d1 .. dk]` and samples its own token
   at each position with the request's sampler, left to right; a draft token is
   accepted while it equals the target's token, and the first target token that differs
   (or follows the last draft) is the bonus token;
4. KV of rejected positions is freed (whole pages only; a partly kept page stays with
   the request and is refilled next step).

Because every emitted token is the target's own choice given an accepted prefix, and
the sampler draws exactly once per emitted token, the output equals target-only
decoding token for token (greedy, and sampled with the same seed). The draft only
changes how many tokens one target forward yields: the accept length in the stats.

The draft runner shares the target's allocator and request table and keeps its K/V in
its own pool at the same slots (DESIGN.md section 5), so one slot list serves both.

Drafts are a single chain: `speculative_eagle_topk > 1` (a token tree verified with a
tree mask) sizes the pools as configured but is drafted as topk 1, and the engine logs
`speculative.single_chain` once at start. Output is unaffected; only the accept length
is lower than a tree would reach.
"""

from __future__ import annotations

from typing import Any

import torch

from attention.forward_batch import ForwardBatch
from engine.scheduler import Req


class SpeculativeWorker:
    """Draft-and-verify decoding over a target runner and a draft runner."""

    def __init__(self, target: Any, draft: Any, *, num_steps: int, algorithm: str) -> None:
        self.target = target
        self.draft = draft
        self.num_steps = num_steps
        self.algorithm = algorithm
        self.verify_steps = 0
        self.emitted = 0
        self.proposed = 0
        self.accepted = 0

    @property
    def tokens_per_step(self) -> int:
        """Most tokens one step may hold KV for beyond a request's length (the verify window)."""
        return self.num_steps + 1

    @property
    def accept_length(self) -> float:
        """Mean tokens emitted per verify forward (1.0 means the draft never helped)."""
        return self.emitted / self.verify_steps if self.verify_steps else 0.0

    def draft_extend(self, batch: ForwardBatch, ids: torch.Tensor, positions: torch.Tensor, reqs: list[Req]) -> None:
        """Run the draft over a prefill batch the target just ran (same slots)."""
        self.draft.forward(batch, ids, positions)
        for req, n in zip(reqs, batch.extend_lens_cpu, strict=True):
            if req.draft_kv_len == req.kv_len:
                req.draft_kv_len += n

    def step(self, sched: Any) -> None:
        """One draft-and-verify step for every decoding request."""
        k = self.num_steps
        while True:
            reqs: list[Req] = sched.decoding
            out = sched.alloc_with_eviction(
                lambda reqs=reqs: sched.allocator.alloc_extend(
                    [r.kv_len for r in reqs], [r.kv_len + k + 1 for r in reqs], [sched.last_loc(r) for r in reqs]
                ),
                len(reqs) * (k + 1),
            )
            if out is not None:
                break
            if not sched._retract_newest():
                sched._fail_decoding(reqs[0])
                return
        for i, req in enumerate(reqs):
            sched.req_pool.write(req.row, req.kv_len, out[i * (k + 1) : (i + 1) * (k + 1)])
        self._catch_up(sched, reqs)
        drafts = self._propose(reqs, out)
        self._verify(sched, reqs, drafts, out)

    def _catch_up(self, sched: Any, reqs: list[Req]) -> None:
        behind = [r for r in reqs if r.draft_kv_len < r.kv_len]
        if not behind:
            return
        batch = ForwardBatch.extend(
            req_pool_indices=[r.slot_row for r in behind],
            seq_lens=[r.kv_len for r in behind],
            extend_prefix_lens=[r.draft_kv_len for r in behind],
            out_cache_loc=torch.cat([sched.slots_of(r, r.draft_kv_len, r.kv_len) for r in behind]),
        )
        ids = torch.tensor([t for r in behind for t in r.all_ids[r.draft_kv_len : r.kv_len]], dtype=torch.long)
        positions = torch.cat([torch.arange(r.draft_kv_len, r.kv_len) for r in behind])
        self.draft.forward(batch, ids, positions)
        for r in behind:
            r.draft_kv_len = r.kv_len

    def _propose(self, reqs: list[Req], slots: torch.Tensor) -> list[list[int]]:
        k = self.num_steps
        drafts: list[list[int]] = [[] for _ in reqs]
        current = [r.all_ids[-1] for r in reqs]
        rows = [r.slot_row for r in reqs]
        for j in range(k):
            batch = ForwardBatch.decode(
                req_pool_indices=rows,
                seq_lens=[r.kv_len + j + 1 for r in reqs],
                out_cache_loc=torch.stack([slots[i * (k + 1) + j] for i in range(len(reqs))]),
            )
            logits = self.draft.forward(
                batch, torch.tensor(current, dtype=torch.long), torch.tensor([r.kv_len + j for r in reqs])
            )
            current = [int(t) for t in logits.argmax(-1)]
            for i, t in enumerate(current):
                drafts[i].append(t)
        for r in reqs:
            r.draft_kv_len = r.kv_len + k
        return drafts

    def _verify(self, sched: Any, reqs: list[Req], drafts: list[list[int]], slots: torch.Tensor) -> None:
        k = self.num_steps
        batch = ForwardBatch.extend(
            req_pool_indices=[r.slot_row for r in reqs],
            seq_lens=[r.kv_len + k + 1 for r in reqs],
            extend_prefix_lens=[r.kv_len for r in reqs],
            out_cache_loc=slots,
        )
        ids = torch.tensor([t for r, d in zip(reqs, drafts, strict=True) for t in [r.all_ids[-1], *d]], dtype=torch.long)
        positions = torch.cat([torch.arange(r.kv_len, r.kv_len + k + 1) for r in reqs])
        logits = self.target.forward(batch, ids, positions)
        self.verify_steps += 1
        sched.counters["decode_batches"] += 1
        for i, (req, draft) in enumerate(zip(reqs, drafts, strict=True)):
            rows = logits[i * (k + 1) : (i + 1) * (k + 1)]
            emitted = 0
            for j in range(k + 1):
                done = sched.sample_into(req, rows[j])
                if req.error is not None:  # sampling failed: this request alone ends here
                    break
                emitted += 1
                if done or j == k or req.output[-1] != draft[j]:
                    break
            old = req.kv_len
            req.kv_len = old + emitted
            req.draft_kv_len = min(req.draft_kv_len, req.kv_len)
            sched.free_tail(req, req.kv_len, old + k + 1)
            req.spec_steps += 1
            req.spec_emitted += emitted
            self.emitted += emitted
            self.proposed += k
            self.accepted += emitted - 1
            sched.counters["decode_tokens"] += emitted
        sched.reap()
