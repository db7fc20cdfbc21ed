"""The scheduler's admission: which waiting requests get a row this step, and the cached prefix each starts from.

A mixin of `engine.scheduler.Scheduler`, run on the scheduler thread only. The order
comes from `schedule_policy` (`engine.policy`), then units of work take turns and a
large unit is held to `fair_unit_rows` rows while a small one is in the engine (or was,
within `fair_hold_steps` steps: a client's gap between two short requests); a
request is admitted while rows, `max_running_requests` and the memory reserve of
`schedule_conservativeness` allow, and starts from the longest cached page prefix
(prefix cache, then the HiCache tiers).

It runs every step, often with hundreds of batch items waiting and a few rows free, so it
costs one pass over the queue, not a sort of it: with no row free it returns at once, under
fcfs the units' heads are merged (`engine.policy.FairTurns`) for as many requests as are
taken, and a bulk unit at its rows is skipped whole. The queue keeps its arrival order;
`bulk_passed` still counts each request passed over, one per step it waits that way.
"""

from __future__ import annotations

import collections
import itertools
import math
from typing import Any

import torch

from engine.policy import DRAWING_POLICIES, fair_turns, order_waiting, units_over
from engine.request_state import Req

# Share of a request's remaining max_new_tokens that admission keeps free for it, at
# schedule_conservativeness 1.0 (SGLang starts its new-token ratio near here too).
NEW_TOKEN_RATIO = 0.5
NEVER = -(1 << 62)  # the step a small unit was last seen, when none was since the engine was last idle


class SchedulerAdmission:
    """Admission of the scheduler (see the module docstring)."""

    allocator: Any
    req_pool: Any
    cache: Any
    hicache: Any
    limits: Any
    snap: Any
    rng: Any
    admission_paused: int
    step_index: int  # steps begun
    small_unit_seen: int  # the last step whose admission saw a unit of at most `fair_unit_rows` requests
    waiting: collections.deque[Req]
    prefilling: list[Req]
    decoding: list[Req]
    counters: Any

    def max_running(self) -> int:
        raise NotImplementedError  # the scheduler's, from its live settings

    def _admit(self) -> None:
        if self.admission_paused or not self.waiting:
            return
        policy = self.snap.schedule.schedule_policy if self.snap is not None else "fcfs"
        running = [*self.prefilling, *self.decoding]
        limit = self.max_running()
        if len(running) >= limit:
            if policy in DRAWING_POLICIES:  # rank anyway: the draws stay those of a run with free rows
                order_waiting(list(self.waiting), policy, self.cache, self.rng)
            return
        turns = fair_turns(self.waiting, running, policy, self.cache, self.rng)
        ratio = NEW_TOKEN_RATIO * float(self.snap.schedule.schedule_conservativeness) if self.snap is not None else 0.0
        rows = int(self.snap.schedule.fair_unit_rows) if self.snap is not None else 0
        held = collections.Counter(r.group for r in running)
        bulk = self._bulk_units(held + turns.sizes, rows) if rows > 0 else frozenset()
        reserved = sum(self._reserve(r, ratio) for r in running) if ratio > 0 else 0
        free = int(self.allocator.available_size()) + (self.cache.evictable_tokens() if self.cache is not None else 0)
        admitted: list[Req] = []
        while len(running) < limit and (req := turns.head()) is not None:
            if req.group in bulk and held[req.group] >= rows:
                # a bulk unit at its rows: its requests keep their place for a later step. Its turn is
                # `rows` or more and that of every request that may still be admitted is below, so
                # the requests it passes come before wherever admission stops: all count as passed
                turns.set_aside()
                continue
            need = req.prefill_target - req.kv_len + self._reserve(req, ratio)
            if running and ratio > 0 and free - reserved < need:
                # the running requests' expected growth would not fit: leave it waiting rather
                # than retract someone later (schedule_conservativeness 0 admits what fits now)
                self.counters["admission_deferred"] += 1
                break
            slots = self.req_pool.alloc(1)
            if slots is None:
                break
            turns.take()
            admitted.append(req)
            req.row = slots[0]
            self._match_prefix(req)
            self.prefilling.append(req)
            running.append(req)
            held[req.group] += 1
            reserved += need
            self.counters["admitted"] += 1
        if turns.passed:
            self.counters["bulk_passed"] += turns.passed
        if admitted:  # the queue keeps its own order; each step ranks it afresh
            taken = set(admitted)
            self.waiting = collections.deque(itertools.filterfalse(taken.__contains__, self.waiting))

    def _bulk_units(self, sizes: collections.Counter[int], rows: int) -> frozenset[int]:
        """The units held to `rows` this step: beside a small unit, or within `fair_hold_steps` of one's last step.

        A client that sends short requests one after another leaves the engine for a
        step or two between them (its answer, its next request); without the hold each
        gap hands every row to the bulk, and the client's next request waits for that
        step, the longest of all.
        """
        if any(n <= rows for n in sizes.values()):
            self.small_unit_seen = self.step_index
        hold = int(self.snap.schedule.fair_hold_steps) if self.snap is not None else 0
        return units_over(sizes, rows, holding=self.step_index - self.small_unit_seen <= hold)

    @staticmethod
    def _reserve(req: Req, ratio: float) -> int:
        """Tokens kept free for a request's future decodes: `ratio` of what it may still generate."""
        return math.ceil(ratio * max(0, req.max_new_tokens - len(req.output)))

    def _match_prefix(self, req: Req) -> None:
        req.kv_len = 0
        req.matched_len = 0
        if self.cache is None:
            return
        ids = req.all_ids
        limit = req.prefill_target
        match = self.cache.match(ids, limit=limit)
        if self.hicache is not None and match.length + self.limits.page_size <= limit:
            loaded = self.hicache.load_prefix(ids, match.length, limit, self)
            if loaded:
                req.prefetched_tokens += loaded
                match = self.cache.match(ids, limit=limit)
        self.cache.lock(match.node)
        req.node = match.node
        if match.length:
            self.req_pool.write(req.slot_row, 0, torch.tensor(match.slots, dtype=torch.int64))
        req.kv_len = req.draft_kv_len = req.matched_len = match.length
        req.cached_tokens = max(req.cached_tokens, match.length)
        self.counters["cached_tokens"] += match.length


__all__ = ["NEVER", "NEW_TOKEN_RATIO", "SchedulerAdmission"]
