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

The draft settings are read at every step from the step's config snapshot, so they are
hot: `speculative_num_steps` and `speculative_num_draft_tokens` give the chain length
(`min(steps, draft_tokens - 1)`), never more than the `max_steps` the pools were
planned for at start-up (the engine refuses an override above it).
`speculative_accept_threshold_single` relaxes acceptance when sampling: a draft token
the target's sampler did not pick is still accepted when the target gives it at least
that probability (1.0, the default, accepts only the target's own picks, so output
equals target-only decoding; lower values trade that exactness for longer accepts, as
in SGLang's speculative sampling).

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
        self.max_steps = num_steps  # what the pools and request rows were planned for
        self.num_steps = num_steps  # the chain length of the latest step
        self.algorithm = algorithm
        self.verify_steps = 0
        self.emitted = 0
        self.proposed = 0
        self.accepted = 0

    @property
    def tokens_per_step(self) -> int:
        """Most tokens one step may hold KV for beyond a request's length (the planned verify window)."""
        return self.max_steps + 1

    def chain_length(self, snap: Any) -> int:
        """Draft tokens per step under the snapshot's settings, within the planned maximum."""
        if snap is None:
            return self.max_steps
        spec = snap.spec
        steps = int(spec.speculative_num_steps or self.max_steps)
        if spec.speculative_num_draft_tokens is not None:
            steps = min(steps, int(spec.speculative_num_draft_tokens) - 1)
        return max(0, min(steps, self.max_steps))

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
        k = self.num_steps = self.chain_length(sched.snap)
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
        ids = torch.tensor(
            [t for r, d in zip(reqs, drafts, strict=True) for t in [r.all_ids[-1], *d]], dtype=torch.long
        )
        positions = torch.cat([torch.arange(r.kv_len, r.kv_len + k + 1) for r in reqs])
        logits = self.target.forward(batch, ids, positions)
        threshold = float(sched.snap.spec.speculative_accept_threshold_single) if sched.snap is not None else 1.0
        self.verify_steps += 1
        sched.counters["decode_batches"] += 1
        for i, (req, draft) in enumerate(zip(reqs, drafts, strict=True)):
            rows = logits[i * (k + 1) : (i + 1) * (k + 1)]
            emitted = 0
            for j in range(k + 1):
                token = sched.sample_or_fail(req, rows[j])
                if token is None:  # sampling failed: this request alone ends here
                    break
                if j < k and token != draft[j] and not req.params.greedy and threshold < 1.0:
                    prob = torch.softmax(rows[j].float() / req.temperature, dim=-1)[draft[j]]
                    if float(prob) >= threshold:
                        token = draft[j]
                emitted += 1
                done = sched.emit(req, token)
                if done or j == k or token != draft[j]:
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
