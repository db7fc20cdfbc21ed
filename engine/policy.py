"""Scheduling policies: the order in which waiting requests are admitted.

The scheduler asks for an order at every admission round with the policy named by
`get_schedule().schedule_policy` at that step, so an override changes the very next
admission. Requests that were retracted go first under every policy: they already
made progress and were pushed back only to free memory.

- `fcfs`: arrival order.
- `lpm`: longest cached prefix first (probing the prefix cache without touching its
  LRU or hit counters), then arrival; without a prefix cache, arrival order.
- `random`: a shuffle drawn from the scheduler's own generator (seeded from
  `random_seed`), so a run is reproducible.
- `dfs-weight`: a depth-first walk of the prefix tree, heavier subtrees (more waiting
  requests under them) first, so requests sharing a prefix run together while it is
  cached; without a prefix cache, arrival order.

Whatever the policy, rows are then shared fairly between units of work (`fair_share`):
the requests of one batch (or the n choices of one prompt) form a unit, and a unit with
fewer requests running goes first, so one client's fan-out cannot hold back another
client's request for longer than it takes one of the batch's requests to give a row back.

Taking turns bounds how long a short request waits for a row, not how long its steps
take: a step costs more with every request in it, so a short request admitted beside 63
items of a batch decodes at the batch's pace. `bulk_units` names the units that are held
to `fair_unit_rows` rows while a unit of at most that size is in the engine (and, by the
scheduler's `fair_hold_steps`, for a few steps after one was); alone, or beside other
large units, a batch still fills every row.

Admission takes that order a request at a time from `fair_turns` (a `FairTurns`), which
under `fcfs` merges the units' queues instead of sorting the whole queue every step; the
other policies rank every request first, as they must.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from sgconf.errors import UnknownNameError

if TYPE_CHECKING:
    from engine.request_state import Req


class PrefixProbe(Protocol):
    """What a policy needs from the prefix cache: a read-only longest-prefix match."""

    def match(self, ids: Sequence[int], *, limit: int | None = None, touch: bool = True) -> Any: ...


Policy = Callable[[list["Req"], "PrefixProbe | None", random.Random], list["Req"]]


def _fcfs(reqs: list[Req], cache: PrefixProbe | None, rng: random.Random) -> list[Req]:
    return sorted(reqs, key=lambda r: r.rid)


def _lpm(reqs: list[Req], cache: PrefixProbe | None, rng: random.Random) -> list[Req]:
    if cache is None:
        return _fcfs(reqs, cache, rng)
    lengths = {r.rid: cache.match(r.all_ids, limit=r.prefill_target, touch=False).length for r in reqs}
    return sorted(reqs, key=lambda r: (-lengths[r.rid], r.rid))


def _random(reqs: list[Req], cache: PrefixProbe | None, rng: random.Random) -> list[Req]:
    out = _fcfs(reqs, cache, rng)
    rng.shuffle(out)
    return out


def _dfs_weight(reqs: list[Req], cache: PrefixProbe | None, rng: random.Random) -> list[Req]:
    if cache is None:
        return _fcfs(reqs, cache, rng)
    paths: dict[int, list[Any]] = {}
    weight: dict[int, int] = {}
    first: dict[int, int] = {}
    for r in reqs:
        node = cache.match(r.all_ids, limit=r.prefill_target, touch=False).node
        path = []
        while node is not None and node.parent is not None:
            path.append(node)
            node = node.parent
        path.reverse()
        paths[r.rid] = path
        for n in path:
            weight[id(n)] = weight.get(id(n), 0) + 1
            first[id(n)] = min(first.get(id(n), r.rid), r.rid)

    # Tuples compare element-wise and a prefix sorts first, so this key is a DFS that
    # visits heavier children first and puts a node's own requests before its subtree's.
    def key(r: Req) -> tuple[Any, ...]:
        return (*((-weight[id(n)], first[id(n)]) for n in paths[r.rid]), (_OWN, r.rid))

    return sorted(reqs, key=key)


# sorts before any child's (-weight, rid): a node's own requests come before its subtree's
_OWN = float("-inf")

POLICIES: dict[str, Policy] = {"fcfs": _fcfs, "lpm": _lpm, "random": _random, "dfs-weight": _dfs_weight}

# Policies that draw from the scheduler's generator whenever they rank: a round that admits
# nothing still ranks with them, so a seeded run makes the same draws whatever the free rows.
DRAWING_POLICIES = frozenset({"random"})


def order_waiting(reqs: Sequence[Req], policy: str, cache: PrefixProbe | None, rng: random.Random) -> list[Req]:
    """`reqs` in admission order under `policy`; retracted requests first, in arrival order.

    Raises UnknownNameError (a KeyError) naming the known policies for an unknown name (declarations keep
    that from happening through config).
    """
    try:
        rank = POLICIES[policy]
    except KeyError:
        raise UnknownNameError(f"unknown schedule_policy {policy!r} -- use one of {', '.join(POLICIES)}") from None
    retracted = sorted((r for r in reqs if r.retractions), key=lambda r: r.rid)
    fresh = [r for r in reqs if not r.retractions]
    return [*retracted, *rank(fresh, cache, rng)]


def fair_share(ordered: Sequence[Req], running: Sequence[Req]) -> list[Req]:
    """`ordered` (the policy's order) interleaved between units: the k-th waiting request of a unit that
    has r running sorts at r + k, ties kept in the policy's order. Retracted requests stay first."""
    return list(FairTurns.of(ordered, running))


_RID = attrgetter("rid")
_GROUP = attrgetter("group")
_RETRACTIONS = attrgetter("retractions")
_KEY = itemgetter(0)
# at most one run of a unit's requests per this many waiting requests: grouping run by run is the cheaper way
_FEW_UNITS = 8

# (0 for a retracted request else 1, its turn, its place in the policy's order): fair_share sorts by it
TurnKey = tuple[int, int, int]


@attrs.define(slots=True, eq=False)
class _Stream:
    """Waiting requests whose keys rise along the list: merging the streams' heads gives fair_share's order.

    Under fcfs a stream is either the requests of one unit and class (`unit`; turn base, base + 1, ...)
    or the lone waiting requests of many units that share a class and a turn (`step` 0), and a
    key, (cls, base + step * k, rid), is made only when asked for. A ranked order is one stream
    with its `keys` made up front.
    """

    cls: int
    base: int
    step: int
    reqs: list[Req]
    unit: bool  # whether every request of the stream is of one unit: setting one aside sets all aside
    keys: list[TurnKey] | None = None
    at: int = 0

    def key(self, k: int) -> TurnKey:
        if self.keys is not None:
            return self.keys[k]
        return (self.cls, self.base + self.step * k, self.reqs[k].rid)


@attrs.define(slots=True, eq=False)
class FairTurns:
    """`fair_share`'s order, handed out a request at a time, for admission.

    Admission takes only the first few requests of that order (as many as rows are free), so
    under fcfs, instead of sorting every waiting request each step, this groups them by unit
    once and merges the units' heads with a heap. When a unit's turn is skipped (`set_aside`:
    a bulk unit at its rows) its requests leave the merge at once, each counted in `passed`.
    """

    streams: list[_Stream]
    heap: list[tuple[TurnKey, int]]
    sizes: Counter[int]  # waiting requests per unit
    passed: int = 0  # requests set aside

    @classmethod
    def fcfs(cls, waiting: Sequence[Req], running: Iterable[Req]) -> FairTurns:
        """fair_share(order_waiting(waiting, "fcfs", ...), running) without sorting the whole queue.

        The requests are grouped by unit in passes at C speed as a rule: run by run when there
        are few units (a unit's requests arrive together), by filters on the unit counts when
        there are many; only retracted requests in the queue take a step per request. The
        units with one request waiting share a stream per turn, so a crowd of single requests
        costs no step per unit either.
        """
        held = Counter(map(_GROUP, running))
        units: dict[tuple[int, int], list[Req]] = {}  # (class, unit): its requests of that class
        lone: dict[tuple[int, int], list[Req]] = {}  # (class, turn): requests alone in their unit and class
        ahead: Counter[int] = Counter()  # retracted requests per unit: they take its first turns
        if any(map(_RETRACTIONS, waiting)):
            for req in waiting:
                units.setdefault((0 if req.retractions else 1, req.group), []).append(req)
            for (c, group), reqs in units.items():
                if not c:
                    ahead[group] = len(reqs)
            sizes = Counter(map(_GROUP, waiting))
        else:
            runs = itertools.groupby(waiting, _GROUP)
            for group, run in itertools.islice(runs, max(1, len(waiting) // _FEW_UNITS)):
                units.setdefault((1, group), []).extend(run)
            if next(runs, None) is None:  # a few units, each arrived together: one run each
                sizes = Counter({group: len(reqs) for (_, group), reqs in units.items()})
            else:  # many units, most of them of one request: filters at C speed, not a step per unit
                units.clear()
                sizes = Counter(map(_GROUP, waiting))
                single = {group for group, n in sizes.items() if n == 1}
                if len(single) < len(sizes):
                    several = sizes.keys() - single
                    for group, run in itertools.groupby(_of_units(waiting, several), _GROUP):
                        units.setdefault((1, group), []).extend(run)
                if behind := single & held.keys():  # units that have requests running too: a later turn
                    for req in _of_units(waiting, behind):
                        lone.setdefault((1, held[req.group]), []).append(req)
                if single := single - behind:
                    lone.setdefault((1, 0), []).extend(_of_units(waiting, single))
        for c, group in [key for key, reqs in units.items() if len(reqs) == 1]:
            lone.setdefault((c, held[group] + (ahead[group] if c else 0)), []).extend(units.pop((c, group)))
        streams: list[_Stream] = []
        for (c, group), reqs in units.items():
            reqs.sort(key=_RID)  # in arrival order as a rule: one pass
            streams.append(_Stream(c, held[group] + (ahead[group] if c else 0), 1, reqs, unit=True))
        for (c, turn), reqs in lone.items():
            reqs.sort(key=_RID)
            streams.append(_Stream(c, turn, 0, reqs, unit=False))
        return cls._merge(streams, sizes)

    @classmethod
    def of(cls, ordered: Iterable[Req], running: Iterable[Req]) -> FairTurns:
        """fair_share(ordered, running), for an order a policy ranked: every request's key, one sort."""
        held = Counter(map(_GROUP, running))
        keyed: list[tuple[TurnKey, Req]] = []
        for pos, req in enumerate(ordered):
            turn = held[req.group]
            held[req.group] = turn + 1
            keyed.append(((0 if req.retractions else 1, turn, pos), req))
        keyed.sort(key=_KEY)
        reqs = [req for _, req in keyed]
        sizes = Counter(map(_GROUP, reqs))
        streams = [_Stream(0, 0, 0, reqs, unit=False, keys=[key for key, _ in keyed])] if reqs else []
        return cls._merge(streams, sizes)

    @classmethod
    def _merge(cls, streams: list[_Stream], sizes: Counter[int]) -> FairTurns:
        heap = [(s.key(0), i) for i, s in enumerate(streams)]
        heapq.heapify(heap)
        return cls(streams, heap, sizes)

    def head(self) -> Req | None:
        """The next request in turn, or None when every request was taken or set aside."""
        if not self.heap:
            return None
        stream = self.streams[self.heap[0][1]]
        return stream.reqs[stream.at]

    def take(self) -> Req:
        """Hand out the next request in turn."""
        _, i = self.heap[0]
        stream = self.streams[i]
        req = stream.reqs[stream.at]
        stream.at += 1
        if stream.at < len(stream.reqs):
            heapq.heapreplace(self.heap, (stream.key(stream.at), i))
        else:
            heapq.heappop(self.heap)
        return req

    def set_aside(self) -> None:
        """Skip the next request's unit: each of its requests still waiting in this stream passes its turn."""
        stream = self.streams[self.heap[0][1]]
        if not stream.unit:
            self.take()
            self.passed += 1
            return
        heapq.heappop(self.heap)
        self.passed += len(stream.reqs) - stream.at

    def __iter__(self) -> Iterator[Req]:
        while self.heap:
            yield self.take()


def _of_units(reqs: Sequence[Req], groups: set[int]) -> Iterator[Req]:
    """The requests of `groups`, in order, filtered at C speed."""
    return itertools.compress(reqs, map(groups.__contains__, map(_GROUP, reqs)))


def fair_turns(
    waiting: Sequence[Req], running: Sequence[Req], policy: str, cache: PrefixProbe | None, rng: random.Random
) -> FairTurns:
    """fair_share(order_waiting(waiting, policy, cache, rng), running) as FairTurns; fcfs sorts nothing whole."""
    if policy == "fcfs":
        return FairTurns.fcfs(waiting, running)
    return FairTurns.of(order_waiting(waiting, policy, cache, rng), running)


def bulk_units(waiting: Sequence[Req], running: Sequence[Req], rows: int) -> frozenset[int]:
    """The units of more than `rows` requests, when a unit of at most `rows` is in the engine too (else none).

    Requests of one unit share `group`; `rows` 0 turns the limit off.
    """
    if rows <= 0:
        return frozenset()
    return units_over(Counter(map(_GROUP, (*waiting, *running))), rows)


def units_over(sizes: Mapping[int, int], rows: int, *, holding: bool = False) -> frozenset[int]:
    """`bulk_units` from the number of requests (waiting and running) of each unit.

    `holding`: a small unit was in the engine a moment ago (`fair_hold_steps`), so the
    large units are held even though none is there now.
    """
    if rows <= 0 or (not holding and all(n > rows for n in sizes.values())):
        return frozenset()
    return frozenset(group for group, n in sizes.items() if n > rows)


__all__ = [
    "DRAWING_POLICIES",
    "POLICIES",
    "FairTurns",
    "Policy",
    "PrefixProbe",
    "TurnKey",
    "bulk_units",
    "fair_share",
    "fair_turns",
    "order_waiting",
    "units_over",
]
