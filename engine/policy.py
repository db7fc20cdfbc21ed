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
to `fair_unit_rows` rows while a unit of at most that size is in the engine; alone, or
beside other large units, a batch still fills every row.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

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
    held: dict[int, int] = {}
    for req in running:
        held[req.group] = held.get(req.group, 0) + 1
    keys: dict[int, tuple[int, int, int]] = {}
    for pos, req in enumerate(ordered):
        turn = held.get(req.group, 0)
        held[req.group] = turn + 1
        keys[req.rid] = (0 if req.retractions else 1, turn, pos)
    return sorted(ordered, key=lambda r: keys[r.rid])


def bulk_units(waiting: Sequence[Req], running: Sequence[Req], rows: int) -> frozenset[int]:
    """The units of more than `rows` requests, when a unit of at most `rows` is in the engine too (else none).

    Requests of one unit share `group`; `rows` 0 turns the limit off.
    """
    if rows <= 0:
        return frozenset()
    sizes: dict[int, int] = {}
    for req in (*waiting, *running):
        sizes[req.group] = sizes.get(req.group, 0) + 1
    if all(n > rows for n in sizes.values()):
        return frozenset()
    return frozenset(group for group, n in sizes.items() if n > rows)


__all__ = ["POLICIES", "Policy", "PrefixProbe", "bulk_units", "fair_share", "order_waiting"]
