"""Benchmark the runtime context: accessor and snapshot reads, override, scope and publish costs.

Every number is measured in this one run, side by side with its baseline, and printed
as a ratio; nothing here gates CI. Run: `.venv/bin/python benchmarks/bench_context.py`.

The baseline of a commit is the least any copy-on-write commit does: evolve the one
touched bag, evolve the snapshot around it and swap one reference. An override on top
of that validates, builds the record, receipt, event, log line and fingerprint before
the swap, and keeps the undo stack and the log window; a scope is two such commits.
Goals: override <= 30 us, scope enter + exit <= 60 us, reads as cheap as before.
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
    holder = {"snap": snap}

    def bare_commit() -> None:
        flip["i"] ^= 1
        current = holder["snap"]
        serving = attrs.evolve(current.serving, stream_interval=1 + flip["i"])
        holder["snap"] = attrs.evolve(current, generation=current.generation + 1, serving=serving)

    env["bare_commit"] = bare_commit
    env["scope"] = lambda: ctx.scoped(stream_interval=3)

    def scope_enter_exit() -> None:
        with ctx.scoped(stream_interval=3):
            pass

    env["scope_enter_exit"] = scope_enter_exit
    baseline, override_again, scoped = side_by_side(["bare_commit()", "one_override()", "scope_enter_exit()"], env, 500)
    print(f"attrs.evolve of one bag        {evolve * 1e6:8.2f} us")
    print(f"bare copy-on-write commit      {baseline * 1e6:8.2f} us   (the baseline: evolve bag + snapshot, swap)")
    print(f"override(), 0 subscribers      {override0 * 1e6:8.2f} us   ratio {override0 / baseline:5.1f}x baseline  (goal <= 30 us)")
    print(f"override(), interleaved        {override_again * 1e6:8.2f} us   ratio {override_again / baseline:5.1f}x baseline")
    print(f"override(), 10 subscribers     {override10 * 1e6:8.2f} us   ratio {override10 / baseline:5.1f}x baseline")
    print(f"scoped() enter + exit          {scoped * 1e6:8.2f} us   ratio {scoped / baseline:5.1f}x baseline  (goal <= 60 us)")
    after = side_by_side(["bag.page_size", "get_schedule().page_size"], env, 500_000)
    print(
        f"accessor after {ctx.generation} commits    {after[1] * 1e9:8.1f} ns   ratio {after[1] / after[0]:5.2f}x plain  "
        f"(before: {accessor / plain:.2f}x; readers unchanged)"
    )

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
