"""Admission against the straightforward algorithm it replaces: the same requests, in the same order, same counters.

The reference below sorts every waiting request each step (policy order, then units taking
turns) and pops the requests of a bulk unit at its rows one by one; `_admit` merges the
units' heads instead and sets such a unit aside whole. Random queues (units of every size,
retracted requests, rows, memory and `max_running_requests` running out) must give the same
admissions, rows and counters step after step; only the order the queue is kept in may differ.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from engine.policy import POLICIES, fair_share, order_waiting
from engine.request_state import Req
from engine.scheduler_admission import SchedulerAdmission


def reference_fair_share(ordered: Sequence[Req], running: Sequence[Req]) -> list[Req]:
    held: dict[int, int] = {}
    for req in running:
        held[req.group] = held.get(req.group, 0) + 1
    keys: dict[int, tuple[int, int, int]] = {}
    for pos, req in enumerate(ordered):
        turn = held.get(req.group, 0)
        held[req.group] = turn + 1
        keys[req.rid] = (0 if req.retractions else 1, turn, pos)
    return sorted(ordered, key=lambda r: keys[r.rid])


def reference_bulk_units(waiting: Sequence[Req], running: Sequence[Req], rows: int) -> frozenset[int]:
    if rows <= 0:
        return frozenset()
    sizes: dict[int, int] = {}
    for req in (*waiting, *running):
        sizes[req.group] = sizes.get(req.group, 0) + 1
    if all(n > rows for n in sizes.values()):
        return frozenset()
    return frozenset(group for group, n in sizes.items() if n > rows)


def reference_admit(self: Sched) -> None:
    """The admission step as it was written first: a whole sort per step, bulk requests popped and put back."""
    if self.admission_paused or not self.waiting:
        return
    policy = self.snap.schedule.schedule_policy
    ordered = order_waiting(list(self.waiting), policy, self.cache, self.rng)
    running = [*self.prefilling, *self.decoding]
    self.waiting = collections.deque(reference_fair_share(ordered, running))
    ratio = 0.5 * float(self.snap.schedule.schedule_conservativeness)
    rows = int(self.snap.schedule.fair_unit_rows)
    bulk = reference_bulk_units(self.waiting, running, rows)
    held = collections.Counter(r.group for r in running if r.group in bulk)
    passed: list[Req] = []
    reserved = sum(self._reserve(r, ratio) for r in running)
    free = int(self.allocator.available_size()) + self.cache.evictable_tokens()
    while self.waiting and len(running) < self.max_running():
        req = self.waiting[0]
        if req.group in bulk and held[req.group] >= rows:
            passed.append(self.waiting.popleft())
            continue
        need = req.prefill_target - req.kv_len + self._reserve(req, ratio)
        if running and ratio > 0 and free - reserved < need:
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


class RowPool:
    def __init__(self, rows: int) -> None:
        self.free = list(range(rows))

    def alloc(self, n: int) -> list[int] | None:
        return [self.free.pop(0)] if self.free else None


class Probe:
    """A prefix cache for the policies to rank by: a made-up cached length per prompt, no tree."""

    def match(self, ids: Sequence[int], *, limit: int | None = None, touch: bool = True) -> Any:
        return SimpleNamespace(length=(ids[0] * 7) % 5 * 4, node=None)

    def evictable_tokens(self) -> int:
        return 0


class Sched(SchedulerAdmission):
    """Just what admission reads: rows, tokens, live settings; the prefix cache is not under test."""

    def __init__(self, case: dict[str, Any]) -> None:
        self.snap = SimpleNamespace(
            schedule=SimpleNamespace(
                schedule_policy=case["policy"],
                schedule_conservativeness=case["conservativeness"],
                fair_unit_rows=case["rows"],
                fair_hold_steps=0,  # the algorithm replayed below has no hold
            )
        )
        self.allocator = SimpleNamespace(available_size=lambda: self.tokens)
        self.tokens = case["tokens"]
        self.req_pool = RowPool(case["free_rows"])
        self.cache = Probe()
        self.hicache = None
        self.limits = None
        self.rng = random.Random(case["seed"])
        self.admission_paused = 0
        self.step_index, self.small_unit_seen = 0, -1
        self.counters = collections.Counter()
        self.limit = case["limit"]
        self.asked = 0
        running: list[Req] = []
        waiting: list[Req] = []
        rid = 0
        for group, (size, ahead, retracted, prompt_len, max_new) in enumerate(case["units"], start=1):
            for i in range(size):
                rid += 1
                req = Req(rid=rid, prompt=[rid] * prompt_len, max_new_tokens=max_new, temperature=0.0, generator=None)
                req.group, req.retractions = group, int(ahead <= i < ahead + retracted)
                if i < ahead:
                    req.row = 1000 + rid
                    running.append(req)
                else:
                    waiting.append(req)
        self.decoding = running
        if case["shuffled"]:  # the queue's own order does not matter; as a rule a unit's requests arrive together
            random.Random(case["seed"]).shuffle(waiting)
        self.waiting = collections.deque(waiting)
        self.prefilling = []

    def max_running(self) -> int:
        self.asked += 1
        return self.limit

    def _match_prefix(self, req: Req) -> None:
        req.kv_len = 0

    def finish(self, n: int) -> None:
        """The `n` oldest running requests end: their rows come back, and the next step begins."""
        self.step_index += 1
        running = sorted([*self.prefilling, *self.decoding], key=lambda r: r.rid)
        for req in running[:n]:
            for held in (self.prefilling, self.decoding):
                if req in held:
                    held.remove(req)
            assert req.row is not None
            if req.row < 1000:
                self.req_pool.free.append(req.row)
            req.row = None

    def seen(self) -> tuple[Any, ...]:
        return (
            [(r.rid, r.row) for r in self.prefilling],
            sorted(r.rid for r in self.waiting),
            dict(self.counters),
            self.rng.getstate(),
        )


case = st.fixed_dictionaries(
    {
        "policy": st.one_of(st.just("fcfs"), st.sampled_from(sorted(POLICIES))),  # fcfs has a path of its own
        "conservativeness": st.sampled_from([0.0, 0.5, 1.0, 3.0]),
        "rows": st.integers(0, 5),
        "tokens": st.integers(0, 400),
        "free_rows": st.integers(0, 24),
        "limit": st.integers(0, 24),
        "seed": st.integers(0, 2**16),
        "shuffled": st.booleans(),
        # units of work: (size, how many of them run, how many of the waiting were retracted, prompt, max_new_tokens)
        "units": st.lists(
            st.tuples(
                st.integers(1, 30),
                st.integers(0, 6),
                st.sampled_from([0, 0, 0, 0, 1, 2]),
                st.integers(2, 30),
                st.integers(1, 40),
            ),
            max_size=6,
        ),
        "finish": st.lists(st.integers(0, 6), min_size=1, max_size=4),
    }
)


def rows_for(units: list[tuple[int, ...]], **kw: Any) -> dict[str, Any]:
    base = {"policy": "fcfs", "conservativeness": 0.0, "rows": 0, "tokens": 1000, "free_rows": 4, "limit": 4}
    return {**base, "seed": 0, "shuffled": False, "units": units, "finish": [1, 0], **kw}


@settings(max_examples=600, deadline=None)
@given(case)
# a unit's retracted requests take its first turns, before its fresh ones
@example(rows_for([(7, 0, 2, 4, 8), (5, 0, 0, 4, 8)]))
@example(rows_for([(2, 0, 1, 4, 8), (5, 0, 0, 4, 8)]))
# one request waiting while others of its unit run: it waits for a later turn than a newcomer's
@example(rows_for([(3, 2, 0, 4, 8), (1, 0, 0, 4, 8), (6, 0, 0, 4, 8)], free_rows=2))
# a bulk unit at its rows, beside single requests of both kinds
@example(rows_for([(9, 2, 0, 4, 8), (2, 1, 0, 4, 8), (1, 0, 0, 4, 8), (1, 0, 0, 4, 8)], rows=2))
def test_admission_matches_the_whole_sort_step_after_step(case: dict[str, Any]) -> None:
    new, old = Sched(case), Sched(case)
    for finished in case["finish"]:
        new._admit()
        reference_admit(old)
        assert new.seen() == old.seen()
        new.finish(finished)
        old.finish(finished)


@settings(max_examples=200, deadline=None)
@given(case)
def test_fair_share_is_the_sort_by_turn(case: dict[str, Any]) -> None:
    sched = Sched(case)
    ordered = order_waiting(list(sched.waiting), case["policy"], sched.cache, random.Random(0))
    running = [*sched.decoding]
    assert fair_share(ordered, running) == reference_fair_share(ordered, running)


def held_case(**kw: Any) -> dict[str, Any]:
    """A short request and two 30-item batches running 2 each, every row open: the batches are at their 2 rows."""
    base = {"policy": "fcfs", "conservativeness": 0.0, "rows": 2, "tokens": 10_000, "free_rows": 16, "limit": 16}
    units = [(1, 1, 0, 4, 8), (30, 2, 0, 4, 8), (30, 2, 0, 4, 8)]
    return {**base, "seed": 0, "shuffled": True, "units": units, "finish": [0], **kw}


def test_a_step_that_only_passes_bulk_units_leaves_the_queue_alone() -> None:
    """Every waiting request belongs to a batch at its rows: nothing is admitted, each counts as passed,
    and the queue is neither reordered nor rebuilt; the live limit is read once, not once per request."""
    sched = Sched(held_case())
    queue = sched.waiting
    before = list(queue)
    sched._admit()
    assert sched.counters == {"bulk_passed": 56}
    assert sched.waiting is queue and list(queue) == before
    assert sched.asked == 1


def test_a_step_with_no_free_row_ranks_nothing() -> None:
    """At max_running_requests admission returns before ranking: lpm probes no prompt's cached prefix."""
    sched = Sched(held_case(policy="lpm", limit=5))
    probes = []

    def match(ids: Sequence[int], **kw: Any) -> Any:
        probes.append(ids)
        return Probe().match(ids)

    sched.cache.match = match  # type: ignore[method-assign]
    sched._admit()
    assert probes == [] and sched.counters == {} and sched.asked == 1
