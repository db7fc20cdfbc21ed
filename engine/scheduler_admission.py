"""The scheduler's admission: which waiting requests get a row this step, and the cached prefix each starts from.

A mixin of `engine.scheduler.Scheduler`, run on the scheduler thread only. The order
comes from `schedule_policy` (`engine.policy`), then units of work take turns and a
large unit is held to `fair_unit_rows` rows while a small one is in the engine; a
request is admitted while rows, `max_running_requests` and the memory reserve of
`schedule_conservativeness` allow, and starts from the longest cached page prefix
(prefix cache, then the HiCache tiers).
"""

from __future__ import annotations

import collections
import math
from typing import Any

import torch

from engine.policy import bulk_units, fair_share, order_waiting
from engine.request_state import Req

# Share of a request's remaining max_new_tokens that admission keeps free for it, at
# schedule_conservativeness 1.0 (SGLang starts its new-token ratio near here too).
NEW_TOKEN_RATIO = 0.5


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
        ordered = order_waiting(list(self.waiting), policy, self.cache, self.rng)
        running = [*self.prefilling, *self.decoding]
        self.waiting = collections.deque(fair_share(ordered, running))
        ratio = NEW_TOKEN_RATIO * float(self.snap.schedule.schedule_conservativeness) if self.snap is not None else 0.0
        rows = int(self.snap.schedule.fair_unit_rows) if self.snap is not None else 0
        bulk = bulk_units(self.waiting, running, rows)
        held = collections.Counter(r.group for r in running if r.group in bulk)
        passed: list[Req] = []  # requests of a bulk unit at its rows: they keep their place for a later step
        reserved = sum(self._reserve(r, ratio) for r in running)
        free = int(self.allocator.available_size()) + (self.cache.evictable_tokens() if self.cache is not None else 0)
        while self.waiting and len(running) < self.max_running():
            req = self.waiting[0]
            if req.group in bulk and held[req.group] >= rows:
                passed.append(self.waiting.popleft())
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
            self.waiting.popleft()
            req.row = slots[0]
            self._match_prefix(req)
            self.prefilling.append(req)
            running.append(req)
            held[req.group] += 1
            reserved += need
            self.counters["admitted"] += 1
        if passed:
            self.counters["bulk_passed"] += len(passed)
            self.waiting.extendleft(reversed(passed))

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


__all__ = ["NEW_TOKEN_RATIO", "SchedulerAdmission"]
