"""The context keeps its promises under failure, concurrency and scopes (see runtime.context's docstring)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from runtime import (
    OverrideReceipt,
    RevertConflict,
    RoleViolation,
    get_context,
    get_memory,
    get_schedule,
    get_serving,
    get_spec,
    override_server_args,
    publish,
    reset,
)
from runtime.fingerprint import fingerprint_of
from sgconf import SERVING, ServerArgs, build_record, record_to_dict
from sgconf.errors import ConfigError, OverrideRefused

TIMEOUT = 60


@pytest.fixture
def raising_sink() -> Iterator[None]:
    """structlog configured so that emitting `config.override` raises, as a closed pipe would."""
    saved = structlog.get_config()

    def broken(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
        if event.get("event") == "config.override":
            raise BrokenPipeError("stdout closed")
        return event

    structlog.configure(processors=[broken, structlog.processors.KeyValueRenderer()])
    yield
    structlog.configure(**saved)


# -- commit is the last step that can fail ------------------------------------------------


def test_a_raising_log_sink_neither_fails_the_override_nor_starves_subscribers(
    ctx: Any, raising_sink: None, capsys: Any
) -> None:
    """A log sink that raises after the swap leaves the new state live, returns the receipt, notifies everyone."""
    heard = []
    ctx.subscribe(lambda e: heard.append(e.generation))
    receipt = ctx.override("http", stream_interval=4)
    assert isinstance(receipt, OverrideReceipt) and receipt.generation == 1
    assert get_serving().stream_interval == 4 and heard == [1]
    assert "sgconf: could not log config.override (BrokenPipeError: stdout closed)" in capsys.readouterr().err


def test_a_system_exit_subscriber_lets_every_other_subscriber_run_then_propagates(ctx: Any) -> None:
    """SystemExit from a subscriber: the commit stands, every later subscriber hears it, then SystemExit is raised."""
    heard: list[str] = []
    ctx.subscribe(lambda e: heard.append("first"))

    def stop(_: Any) -> None:
        raise SystemExit(3)

    ctx.subscribe(stop)
    ctx.subscribe(lambda e: heard.append("last"))
    with capture_logs() as logs, pytest.raises(SystemExit):
        ctx.override("http", stream_interval=4)
    assert heard == ["first", "last"]
    assert get_serving().stream_interval == 4 and ctx.generation == 1
    interrupted = [e for e in logs if e["event"] == "config.subscriber_interrupted"]
    assert len(interrupted) == 1 and interrupted[0]["error"] == "SystemExit"


def test_a_failing_subscriber_is_logged_and_swallowed(ctx: Any) -> None:
    """An Exception from a subscriber is logged once; the others run and the override returns its receipt."""
    heard = []
    ctx.subscribe(lambda e: 1 / 0)
    ctx.subscribe(lambda e: heard.append(e.source))
    with capture_logs() as logs:
        receipt = ctx.override("http", stream_interval=4)
    assert receipt.generation == 1 and heard == ["http"]
    (failed,) = [e for e in logs if e["event"] == "config.subscriber_failed"]
    assert failed["error"] == "ZeroDivisionError: division by zero"


def test_a_scope_whose_entry_is_interrupted_takes_its_value_away(ctx: Any) -> None:
    """KeyboardInterrupt while subscribers hear a scope's entry: the scope is left again before it propagates."""
    seen = []

    def interrupt(event: Any) -> None:
        seen.append(event.source)
        if event.source == "scoped":
            raise KeyboardInterrupt

    ctx.subscribe(interrupt)
    with pytest.raises(KeyboardInterrupt):
        with ctx.scoped(page_size=16):
            pytest.fail("the body must not run")  # pragma: no cover
    assert get_schedule().page_size == 1
    assert seen == ["scoped", "scoped.restore"]


def test_a_side_effect_that_fails_after_the_swap_rolls_back_with_a_new_generation() -> None:
    """apply_override(): the effect raising brings back the exact previous values as a new generation."""
    context = publish(build_record({"enable_hierarchical_cache": True}), role="scheduler")
    try:
        before = context.snapshot()
        fingerprint = context.fingerprint()
        heard = []
        context.subscribe(lambda e: heard.append(e.source))
        seen_inside = []

        def effect(receipt: OverrideReceipt) -> None:
            seen_inside.append((receipt.generation, get_memory().hicache_storage_backend))
            raise OSError("controller refused the backend")

        with capture_logs() as logs, pytest.raises(OSError, match="controller refused"):
            context.apply_override("hicache.attach", effect, hicache_storage_backend="file")
        assert seen_inside == [(1, "file")]
        assert get_memory().hicache_storage_backend is None
        assert context.generation == 2 and context.snapshot().memory == before.memory
        assert context.fingerprint() == fingerprint and heard == []
        assert [(r.source, r.generation) for r in context.overrides_log()] == [
            ("hicache.attach", 1),
            ("rollback:hicache.attach", 2),
        ]
        (rolled,) = [e for e in logs if e["event"] == "config.rollback"]
        assert rolled["fields"] == {"hicache_storage_backend": {"old": "file", "new": None}}
        ok = context.apply_override("hicache.attach", lambda r: None, hicache_storage_backend="file")
        assert ok.generation == 3 and heard == ["hicache.attach"]
    finally:
        reset()


# -- scopes are stacks with identity --------------------------------------------------------


def test_scopes_closed_out_of_order_in_threads_leave_exactly_the_later_scope(ctx: Any) -> None:
    """Thread A enters, thread B enters, A exits first: exactly B's fields stay, then nothing."""
    a_in, b_in, a_out, b_go = (threading.Event() for _ in range(4))
    errors: list[BaseException] = []

    def run(
        values: dict[str, Any], entered: threading.Event, wait_for: threading.Event, done: threading.Event | None
    ) -> None:
        try:
            with ctx.scoped(**values):
                entered.set()
                assert wait_for.wait(TIMEOUT)
            if done is not None:
                done.set()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    a = threading.Thread(target=run, args=({"page_size": 16, "schedule_policy": "lpm"}, a_in, b_in, a_out))
    b = threading.Thread(target=run, args=({"page_size": 32, "stream_interval": 5}, b_in, b_go, None))
    a.start()
    assert a_in.wait(TIMEOUT)
    b.start()
    assert a_out.wait(TIMEOUT)  # A left while B is still inside
    values = (get_schedule().page_size, get_schedule().schedule_policy, get_serving().stream_interval)
    assert values == (32, "fcfs", 5)
    b_go.set()
    a.join(TIMEOUT)
    b.join(TIMEOUT)
    assert errors == []
    assert (get_schedule().page_size, get_serving().stream_interval) == (1, 1)
    assert ctx.generation == 4


def test_scopes_closed_out_of_order_in_tasks_leave_exactly_the_later_scope(ctx: Any) -> None:
    """Two asyncio tasks: the first to enter leaves first; the second's fields stay until it leaves."""

    async def main() -> tuple[Any, ...]:
        first_in, second_in, first_out, second_go = (asyncio.Event() for _ in range(4))

        async def first() -> None:
            with ctx.scoped(page_size=16):
                first_in.set()
                await second_in.wait()
            first_out.set()

        async def second() -> None:
            await first_in.wait()
            with ctx.scoped(page_size=64, stream_interval=7):
                second_in.set()
                await second_go.wait()

        tasks = [asyncio.create_task(first()), asyncio.create_task(second())]
        await asyncio.wait_for(first_out.wait(), TIMEOUT)
        middle = (get_schedule().page_size, get_serving().stream_interval)
        second_go.set()
        await asyncio.wait_for(asyncio.gather(*tasks), TIMEOUT)
        return middle, (get_schedule().page_size, get_serving().stream_interval)

    assert asyncio.run(main()) == ((64, 7), (1, 1))


def test_scopes_in_generators_closed_out_of_order(ctx: Any) -> None:
    """A generator suspended inside a scope, closed after a later one, still takes only its own value away."""

    def scoped_gen(**values: Any) -> Iterator[None]:
        with ctx.scoped(**values):
            yield

    outer, inner = scoped_gen(page_size=8), scoped_gen(stream_interval=6)
    next(outer)
    next(inner)
    outer.close()
    assert (get_schedule().page_size, get_serving().stream_interval) == (1, 6)
    inner.close()
    assert (get_schedule().page_size, get_serving().stream_interval) == (1, 1)


def test_a_scope_cannot_be_entered_twice(ctx: Any) -> None:
    """A scope object is one entry; entering it again is refused without a change."""
    scope = ctx.scoped(page_size=4)
    with scope:
        with pytest.raises(RuntimeError, match="already entered"):
            scope.__enter__()
    assert get_schedule().page_size == 1


# -- generations strictly increase --------------------------------------------------------


def test_generations_strictly_increase_through_scopes_and_reverts(ctx: Any) -> None:
    """Every change gets a new, higher generation: no event ever repeats or goes back."""
    events = []
    ctx.subscribe(lambda e: events.append((e.source, e.generation)))
    with ctx.scoped(stream_interval=3):
        a = ctx.override("http", schedule_policy="lpm")
    b = ctx.override("http", stream_interval=4)
    b.revert()
    a.revert()
    with ctx.scoped(page_size=8):
        pass
    assert [g for _, g in events] == list(range(1, 9))
    assert ctx.generation == 8
    assert [s for s, _ in events] == [
        "scoped",
        "http",
        "scoped.restore",
        "http",
        "revert:http",
        "revert:http",
        "scoped",
        "scoped.restore",
    ]


# -- undo in any order ----------------------------------------------------------------------


def test_two_overrides_of_one_field_undo_in_either_receipt_order(ctx: Any) -> None:
    """B then A reverted restores the value before both; A before B is refused naming B; the log shows each step."""
    a = ctx.override("ops", stream_interval=2)
    b = ctx.override("http", stream_interval=3)
    with pytest.raises(RevertConflict, match="changed since by 'http' at generation 2"):
        a.revert()
    b.revert()
    assert get_serving().stream_interval == 2
    a.revert()
    assert get_serving().stream_interval == 1
    steps = [(r.source, r.changes[0].old, r.changes[0].new) for r in ctx.overrides_log()]
    assert steps == [("ops", 1, 2), ("http", 2, 3), ("revert:http", 3, 2), ("revert:ops", 2, 1)]


# -- resolved stays resolved ----------------------------------------------------------------


def test_a_resolved_field_cannot_go_back_to_none() -> None:
    """Resolution decided speculative_num_steps; an override or a scope setting it to None is refused."""
    context = publish(build_record({"speculative_algorithm": "EAGLE"}), role="scheduler")
    try:
        assert get_spec().speculative_num_steps == 3
        with pytest.raises(OverrideRefused) as info:
            context.override("http", speculative_num_steps=None)
        assert str(info.value) == (
            "override from 'http' rejected, nothing changed\n"
            "  $.spec.speculative_num_steps: 'speculative_num_steps' was resolved to 3 at publish and cannot go back "
            "to None -- override it with a concrete value (from override http)"
        )
        with pytest.raises(OverrideRefused):
            with context.scoped(attention_backend=None):
                pass  # pragma: no cover
        assert context.generation == 0
        assert context.override("http", speculative_num_steps=3).generation == 1
    finally:
        reset()


def test_publish_refuses_a_model_other_than_the_one_the_record_was_resolved_with(ctx: Any) -> None:
    """publish(record, model=B) of a record resolved with model A raises; the live context stays."""
    record = ServerArgs()
    first = publish(record, role="scheduler", model={"max_position_embeddings": 64})
    with pytest.raises(ConfigError, match="already resolved with another model"):
        publish(record, role="scheduler", model={"max_position_embeddings": 128})
    assert get_context() is first and get_context().model == {"max_position_embeddings": 64}


# -- nothing aliased ------------------------------------------------------------------------


def test_nothing_handed_out_or_taken_in_is_aliased() -> None:
    """Mutating what the context returned, or what the caller passed in, changes nothing in the context."""
    model = {"max_position_embeddings": 64, "layers": [1, 2]}
    context = publish(build_record({"enable_hierarchical_cache": True}), role="scheduler", model=model)
    try:
        model["layers"].append(3)
        assert context.model == {"max_position_embeddings": 64, "layers": [1, 2]}
        context.model["layers"].append(4)  # type: ignore[index]
        assert context.model["layers"] == [1, 2]  # type: ignore[index]
        extra = {"dir": "/tmp/kv", "tiers": [1]}
        context.override("hicache.attach", hicache_storage_backend="file", hicache_storage_backend_extra_config=extra)
        extra["tiers"].append(2)
        fingerprint = context.fingerprint()
        dumped = context.resolved_dict()
        dumped["memory"]["hicache_storage_backend_extra_config"]["tiers"].append(9)
        # values held by the context are deeply frozen: a reader's mutation is refused, not absorbed
        with pytest.raises(AttributeError):
            context.value("hicache_storage_backend_extra_config")["tiers"].append(9)
        with pytest.raises(AttributeError):
            context.explain("hicache_storage_backend_extra_config")[-1].value["tiers"].append(9)
        context.overrides_log()[0].as_dict()["fields"]["hicache_storage_backend_extra_config"]["new"]["tiers"].append(9)
        assert context.value("hicache_storage_backend_extra_config") == {"dir": "/tmp/kv", "tiers": (1,)}
        assert context.resolved_dict() == {**dumped, "memory": context.resolved_dict()["memory"]}
        assert context.resolved_dict()["memory"]["hicache_storage_backend_extra_config"] == {
            "dir": "/tmp/kv",
            "tiers": [1],
        }
        assert context.fingerprint() == fingerprint and context.generation == 1
    finally:
        reset()


# -- equal configs, equal fingerprints --------------------------------------------------------

# within hicache_ratio's range (0, 1000]: an int and the equal float must fingerprint alike
NUMBERS = st.integers(1, 1000) | st.floats(1, 1000, allow_nan=False).filter(float.is_integer)


@settings(max_examples=80, deadline=None)
@given(ratio=NUMBERS, conservative=st.sampled_from([0, 1, 2]), flag=st.sampled_from([0, 1]))
def test_equal_records_have_equal_fingerprints(ratio: float, conservative: int, flag: int) -> None:
    """An int and an equal float, or a bool and an equal int, compare equal, so they fingerprint equal."""
    left = ServerArgs(
        hicache_ratio=float(ratio), schedule_conservativeness=float(conservative), disable_radix_cache=bool(flag)
    )
    right = ServerArgs(hicache_ratio=int(ratio), schedule_conservativeness=conservative, disable_radix_cache=flag)
    assert left == right
    assert fingerprint_of(record_to_dict(left), SERVING) == fingerprint_of(record_to_dict(right), SERVING)


@settings(max_examples=60, deadline=None)
@given(ratio=st.floats(0.5, 64, allow_nan=False), other=st.floats(0.5, 64, allow_nan=False))
def test_any_change_of_a_counted_field_changes_the_fingerprint(ratio: float, other: float) -> None:
    """Two records differing in a counted field never share a fingerprint."""
    left, right = record_to_dict(ServerArgs(hicache_ratio=ratio)), record_to_dict(ServerArgs(hicache_ratio=other))
    assert (fingerprint_of(left, SERVING) == fingerprint_of(right, SERVING)) == (ratio == other)


def test_the_context_fingerprint_follows_each_commit(ctx: Any) -> None:
    """An override of a counted field changes the fingerprint; its revert brings the same one back."""
    start = ctx.fingerprint()
    with ctx.scoped(page_size=16):
        assert ctx.fingerprint() != start
    assert ctx.fingerprint() == start


# -- bounded memory ---------------------------------------------------------------------------


def test_the_overrides_log_keeps_a_window_and_counts_the_rest() -> None:
    """With overrides_log_limit=3, ten overrides keep the last three; explain stays exact for what is in it."""
    context = publish(build_record({"overrides_log_limit": 3}), role="scheduler")
    try:
        with capture_logs():
            context.override("early", schedule_policy="lpm")
            for i in range(2, 11):
                context.override("http", stream_interval=i)
        assert [r.generation for r in context.overrides_log()] == [8, 9, 10]
        assert context.dropped_overrides() == 7
        chain = context.explain("stream_interval")
        assert [(o.layer, o.value) for o in chain[-3:]] == [("override", 8), ("override", 9), ("override", 10)]
        policy = context.explain("schedule_policy")[-1]
        assert policy.value == "lpm" and "dropped from the log window" in policy.detail
        assert len(context._state.writes) <= 3  # older overrides folded into the base
        assert (get_schedule().schedule_policy, get_serving().stream_interval) == ("lpm", 10)
    finally:
        reset()


# -- role enforce covers every read -----------------------------------------------------------


def test_enforce_covers_every_read_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tokenizer in enforce mode cannot read schedule through value(), the snapshot or the config dump."""
    monkeypatch.setenv("SGCONF_ROLE_NAMESPACES", "enforce")
    context = publish(ServerArgs(), role="tokenizer")
    try:
        with pytest.raises(RoleViolation):
            context.value("page_size")
        assert context.explain("page_size")[-1].value == 1  # the audit trail stays readable
        with pytest.raises(RoleViolation):
            context.snapshot().schedule  # noqa: B018
        assert "schedule" not in context.resolved_dict() and "serving" in context.resolved_dict()
        assert context.value("stream_interval") == 1
    finally:
        reset()
    monkeypatch.setenv("SGCONF_ROLE_NAMESPACES", "enforce")
    tokenizer = publish(ServerArgs(), role="tokenizer")
    try:
        # the log audits every change this process made, whatever the namespace
        tokenizer.override("http", stream_interval=2, schedule_policy="lpm")
        assert [c.name for c in tokenizer.overrides_log()[0].changes] == ["stream_interval", "schedule_policy"]
        assert tokenizer.group_values(["schedule_policy"]) == {"schedule_policy": "lpm"}
    finally:
        reset()


# -- override_server_args as a decorator ------------------------------------------------------


def test_decorates_async_functions() -> None:
    """The config is live while the coroutine runs, and gone after."""

    @override_server_args(page_size=16)
    async def body() -> int:
        await asyncio.sleep(0)
        return get_schedule().page_size

    assert asyncio.run(body()) == 16
    with pytest.raises(Exception, match="no runtime config is published"):
        get_schedule()


def test_decorates_generator_functions() -> None:
    """The config is live for every item, values sent in arrive, and it is gone once the generator ends."""

    @override_server_args(page_size=8)
    def items() -> Iterator[int]:
        got = yield get_schedule().page_size
        yield got * get_schedule().page_size

    gen = items()
    assert next(gen) == 8
    assert gen.send(2) == 16
    with pytest.raises(StopIteration):
        next(gen)
    with pytest.raises(Exception, match="no runtime config is published"):
        get_schedule()


def test_decorates_async_generator_functions() -> None:
    """An async generator sees the config for each item; closing it early restores too."""

    @override_server_args(page_size=4)
    async def items() -> Any:
        for i in range(3):
            yield i * get_schedule().page_size

    async def main() -> tuple[list[int], bool]:
        out = [x async for x in items()]
        gen = items()
        first = await gen.__anext__()
        await gen.aclose()
        from runtime import is_published

        return [*out, first], is_published()

    assert asyncio.run(main()) == ([0, 4, 8, 0], False)
