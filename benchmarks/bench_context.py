"""Benchmark the runtime context: accessor and snapshot reads, override and publish costs.

Every number is measured in this one run, side by side with its baseline, and printed
as a ratio; nothing here gates CI. Run: `.venv/bin/python benchmarks/bench_context.py`.
"""

from __future__ import annotations

import logging
import timeit
from collections.abc import Callable

import attrs
import structlog

from runtime import get_context, get_schedule, publish, reset
from sgconf.record import ServerArgs

REPEAT = 7


def best(stmt: str, env: dict, number: int) -> float:
    """Best per-call seconds over REPEAT runs of `number` calls (the least disturbed run)."""
    timer = timeit.Timer(stmt, globals=env)
    return min(timer.repeat(repeat=REPEAT, number=number)) / number


def side_by_side(stmts: list[str], env: dict, number: int) -> list[float]:
    """Best per-call seconds of each statement, runs interleaved so load changes hit all alike."""
    timers = [timeit.Timer(stmt, globals=env) for stmt in stmts]
    found = [float("inf")] * len(stmts)
    for _ in range(REPEAT * 3):
        for i, timer in enumerate(timers):
            found[i] = min(found[i], timer.timeit(number) / number)
    return found


def _bare_call(bag: object) -> Callable[[], object]:
    def bare_call() -> object:
        return bag

    return bare_call


def main() -> None:
    # measure the work, not the console renderer: override events below warning are dropped
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    ctx = publish(ServerArgs(device="cpu"), role="scheduler")
    snap = ctx.snapshot()
    bag = snap.schedule
    env = {"bag": bag, "snap": snap, "get_schedule": get_schedule, "ctx": ctx, "attrs": attrs, "ServerArgs": ServerArgs}

    # the floor of any callable accessor: a bare function handing back a bag it already holds
    env["bare_call"] = _bare_call(bag)
    plain, accessor, snapshot_read, floor = side_by_side(
        ["bag.page_size", "get_schedule().page_size", "snap.schedule.page_size", "bare_call().page_size"],
        env,
        500_000,
    )
    print(f"plain attribute read           {plain * 1e9:8.1f} ns")
    print(f"accessor get_schedule().x      {accessor * 1e9:8.1f} ns   ratio {accessor / plain:5.2f}x  (target <= 3x)")
    print(f"bare function call f().x       {floor * 1e9:8.1f} ns   ratio {floor / plain:5.2f}x  (the floor of a call)")
    print(f"snapshot snap.schedule.x       {snapshot_read * 1e9:8.1f} ns   ratio {snapshot_read / plain:5.2f}x  (target <= 1.5x)")

    evolve = best("attrs.evolve(bag, schedule_conservativeness=0.5)", env, 20_000)
    flip = {"i": 0}

    def one_override() -> None:
        flip["i"] ^= 1
        ctx.override("bench", stream_interval=1 + flip["i"])

    env["one_override"] = one_override
    override0 = best("one_override()", env, 2_000)
    subs = [ctx.subscribe(lambda event: None) for _ in range(10)]
    override10 = best("one_override()", env, 2_000)
    for s in subs:
        s.unsubscribe()
    print(f"attrs.evolve of one bag        {evolve * 1e6:8.2f} us")
    print(f"override(), 0 subscribers      {override0 * 1e6:8.2f} us   ratio {override0 / evolve:5.1f}x evolve")
    print(f"override(), 10 subscribers     {override10 * 1e6:8.2f} us   ratio {override10 / evolve:5.1f}x evolve")

    records = [ServerArgs(device="cpu") for _ in range(REPEAT * 200)]
    it = iter(records)
    env["publish_next"] = lambda: publish(next(it), role="scheduler")
    pub = best("publish_next()", env, 200)
    build = best("ServerArgs(device='cpu')", env, 2_000)
    print(f"publish() of the full config   {pub * 1e6:8.2f} us   (fresh record each time; building one: {build * 1e6:.2f} us)")
    get_context()
    reset()


if __name__ == "__main__":
    main()
