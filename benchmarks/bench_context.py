"""Benchmark the runtime context: accessor and snapshot reads, override, scope and publish costs.

Also: the same reads and override on a runtime's own schema next to the built-in one
(goal: equal within noise), and what deep-frozen list and dict values add to a publish
(goal <= 1.2x).

Every number is measured in this one run, side by side with its baseline, and printed
as a ratio; nothing here gates CI. Run: `.venv/bin/python benchmarks/bench_context.py`.

The baseline of a commit is the least any copy-on-write commit does: evolve the one
touched bag, evolve the snapshot around it and swap one reference. An override on top
of that validates, builds the record, receipt, event, log line and fingerprint before
the swap, and keeps the undo stack and the log window; a scope is two such commits.
Goals: override <= 15 us, scope enter + exit <= two overrides, reads as cheap as before.
"""

from __future__ import annotations

import logging
import timeit
from collections.abc import Callable

import attrs
import structlog

from runtime import accessor, create_context, get_context, get_schedule, publish, reset, use_context
from sgconf import Schema, ServerArgs, setting
from sgconf.fields import META_KEY

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
    print(
        f"snapshot snap.schedule.x       {snapshot_read * 1e9:8.1f} ns   ratio {snapshot_read / plain:5.2f}x  (target <= 1.5x)"
    )
    # inside a use_context() block reads are routed to the caller's context; outside every block
    # they must cost what they cost before use_context existed (the call floor)
    own = create_context(ServerArgs(device="cpu", page_size=16), role="scheduler")
    with use_context(own):
        routed, floor_in_block = side_by_side(["get_schedule().page_size", "bare_call().page_size"], env, 500_000)
    print(
        f"accessor, no use_context open  {accessor * 1e9:8.1f} ns   ratio {accessor / floor:5.2f}x call floor  (goal <= 1.2x)"
    )
    print(
        f"accessor inside use_context()  {routed * 1e9:8.1f} ns   ratio {routed / floor_in_block:5.2f}x call floor  (routed)"
    )

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
    print(
        f"override(), 0 subscribers      {override0 * 1e6:8.2f} us   ratio {override0 / baseline:5.1f}x baseline  (goal <= 15 us)"
    )
    print(
        f"override(), interleaved        {override_again * 1e6:8.2f} us   ratio {override_again / baseline:5.1f}x baseline"
    )
    print(f"override(), 10 subscribers     {override10 * 1e6:8.2f} us   ratio {override10 / baseline:5.1f}x baseline")
    print(
        f"scoped() enter + exit          {scoped * 1e6:8.2f} us   ratio {scoped / override_again:5.2f}x one override  "
        "(goal <= 2x)"
    )
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
    print(
        f"publish() of the full config   {pub * 1e6:8.2f} us   (fresh record each time; building one: {build * 1e6:.2f} us)"
    )
    get_context()
    reset()
    user_schema_vs_builtin()
    deep_freeze_on_publish()


def _user_schema() -> Schema:
    """A runtime's own schema of three namespaces (lora, cache, api), about as wide as the serving ones."""
    schema = Schema("benchrt", env_prefix="BENCHRT_")
    body = {f"lora_{i}": setting(i, help="x") for i in range(8)}
    body["max_loras"] = setting(4, help="adapters", hot=True)
    schema.namespace("lora")(type("LoraConfig", (), {"__annotations__": dict.fromkeys(body, "int"), **body}))
    for name in ("cache", "api"):
        more = {f"{name}_{i}": setting(i, help="x") for i in range(8)}
        schema.namespace(name)(
            type(f"{name.title()}Config", (), {"__annotations__": dict.fromkeys(more, "int"), **more})
        )
    return schema.freeze()


def user_schema_vs_builtin() -> None:
    """Accessor read, snapshot read and one override: a user schema and the built-in one, rounds interleaved."""
    schema = _user_schema()
    get_lora = accessor(schema.namespace_class("lora"))
    cases = {
        "builtin": (
            lambda: publish(ServerArgs(device="cpu"), role="scheduler"),
            "get_schedule().page_size",
            "snap.schedule.page_size",
            "schedule_conservativeness",
            (0.5, 1.0),
        ),
        "user": (
            lambda: publish(schema.record(), role="test"),
            "get_lora().max_loras",
            "snap.lora.max_loras",
            "max_loras",
            (2, 4),
        ),
    }
    found = {key: [float("inf")] * 3 for key in cases}
    env: dict = {"get_schedule": get_schedule, "get_lora": get_lora}
    for _ in range(REPEAT * 2):
        for key, (make, read, snap_read, field, values) in cases.items():
            ctx = make()
            env["snap"] = ctx.snapshot()
            flip = {"i": 0}

            def one_override(ctx=ctx, field=field, values=values, flip=flip) -> None:
                flip["i"] ^= 1
                ctx.override("bench", **{field: values[flip["i"]]})

            env["one_override"] = one_override
            for i, (stmt, number) in enumerate(((read, 200_000), (snap_read, 200_000), ("one_override()", 500))):
                found[key][i] = min(found[key][i], timeit.Timer(stmt, globals=env).timeit(number) / number)
            reset()
    (b_acc, b_snap, b_ov), (u_acc, u_snap, u_ov) = found["builtin"], found["user"]
    print(f"user schema accessor read      {u_acc * 1e9:8.1f} ns   ratio {u_acc / b_acc:5.2f}x builtin  (goal ~1x)")
    print(f"user schema snapshot read      {u_snap * 1e9:8.1f} ns   ratio {u_snap / b_snap:5.2f}x builtin  (goal ~1x)")
    print(f"user schema override()         {u_ov * 1e6:8.2f} us   ratio {u_ov / b_ov:5.2f}x builtin  (goal ~1x)")


def _unfrozen_record_class() -> type:
    """The serving record's fields without the deep-freeze converters: what a record cost before freezing."""
    attributes = {
        a.name: attrs.field(default=a.default, validator=a.validator, metadata={META_KEY: a.metadata[META_KEY]})
        for a in attrs.fields(ServerArgs)
    }
    return attrs.make_class("UnfrozenServerArgs", attributes, frozen=True, slots=True)


def deep_freeze_on_publish() -> None:
    """Build a record from plain values (a dict and a nested list among them) and publish it, frozen vs not."""
    values = {
        "device": "cpu",
        "enable_hierarchical_cache": True,
        "hicache_storage_backend": "file",
        "hicache_storage_backend_extra_config": {"dir": "/tmp/kv", "tiers": [1, 2, {"ssd": [3, 4]}], "n": 8},
    }
    unfrozen = _unfrozen_record_class()
    env = {"ServerArgs": ServerArgs, "Unfrozen": unfrozen, "values": values}
    frozen_build, plain_build = side_by_side(["ServerArgs(**values)", "Unfrozen(**values)"], env, 5_000)
    records = [ServerArgs(**values) for _ in range(REPEAT * 100)]
    it = iter(records)
    env["publish_next"] = lambda: publish(next(it), role="scheduler")
    pub = best("publish_next()", env, 100)
    reset()
    ratio = (frozen_build + pub) / (plain_build + pub)
    print(
        f"record build, deep-frozen      {frozen_build * 1e6:8.2f} us   ratio {frozen_build / plain_build:5.2f}x unfrozen"
    )
    print(
        f"build + publish, deep-frozen   {(frozen_build + pub) * 1e6:8.2f} us   ratio {ratio:5.2f}x unfrozen  (goal <= 1.2x)"
    )


if __name__ == "__main__":
    main()
