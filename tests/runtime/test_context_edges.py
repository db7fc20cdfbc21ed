"""Context behaviour users rely on at its edges: revert events, replaced contexts, reset and installs."""

from __future__ import annotations

from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from runtime import get_context, is_published, override_server_args, publish, reset
from runtime.errors import ContextReplacedError, RevertConflict
from runtime.testing import install_depth
from sgconf import ServerArgs, build_record
from sgconf.errors import ConfigError, OverrideRefused


def test_a_revert_is_announced_to_subscribers(ctx: Any) -> None:
    """Subscribers hear the override and its revert, each with its source, generation and value."""
    events: list[Any] = []
    ctx.subscribe(events.append)
    receipt = ctx.override("ops", schedule_conservativeness=0.5)
    undone = receipt.revert()
    assert [(e.source, e.generation, e.snapshot.schedule.schedule_conservativeness) for e in events] == [
        ("ops", 1, 0.5),
        ("revert:ops", 2, 1.0),
    ]
    # a revert of the revert puts the value back, and is announced too
    undone.revert()
    assert [(e.source, e.generation) for e in events][2:] == [("revert:revert:ops", 3)]
    assert ctx.value("schedule_conservativeness") == 0.5


def test_subscribers_of_other_fields_hear_nothing(ctx: Any) -> None:
    """A subscription to some fields is not called for a change of others, nor for their revert."""
    events: list[Any] = []
    ctx.subscribe(events.append, fields=["stream_interval"])
    ctx.override("ops", schedule_conservativeness=0.5).revert()
    assert events == []
    ctx.override("ops", stream_interval=4)
    assert [e.fields for e in events] == [("stream_interval",)]


def test_a_replaced_context_refuses_validation_and_commits(ctx: Any) -> None:
    """After a later publish the old context neither validates nor overrides, and the new one is untouched."""
    proposal = ctx.validate_override("ops", schedule_conservativeness=0.5)
    live = publish(ServerArgs(), role="scheduler")
    message = "this runtime context was replaced by a later publish() -- call get_context() for the live one"
    with pytest.raises(ContextReplacedError) as info:
        ctx.validate_override("ops", schedule_conservativeness=0.25)
    assert message in str(info.value)
    with pytest.raises(ContextReplacedError):
        ctx.override("ops", schedule_conservativeness=0.25)
    with pytest.raises(ContextReplacedError):
        ctx.commit(proposal)
    assert get_context() is live and live.generation == 0
    assert live.value("schedule_conservativeness") == 1.0


def test_reset_forgets_override_server_args_installs() -> None:
    """reset() drops every install: nothing is published and a later restore() is a no-op."""
    outer = override_server_args(page_size=16)
    inner = override_server_args(tp_size=2)
    outer.install()
    inner.install()
    assert install_depth() == 2 and get_context().record.tp_size == 2
    reset()
    assert install_depth() == 0 and not is_published()
    inner.restore()
    outer.restore()
    assert not is_published() and not inner.installed and not outer.installed
    # and the overrides can be installed again afterwards
    with override_server_args(page_size=8):
        assert get_context().record.page_size == 8
    assert not is_published()


def test_a_refused_field_reports_only_the_refusal(ctx: Any) -> None:
    """A field that may not change is refused before its value is even converted."""
    with pytest.raises(OverrideRefused) as info:
        ctx.override("ops", page_size="x")
    assert info.value.lines() == [
        "$.schedule.page_size: 'page_size' is not hot and source 'ops' is not on its allow-list (got 'x') "
        "-- set --page-size at launch (from override ops)"
    ]


def test_every_write_path_checks_the_source_except_catch_up(ctx: Any) -> None:
    """apply_override and validate_override refuse a field that is not hot; a catch-up is checked by its caller."""
    with pytest.raises(OverrideRefused):
        ctx.apply_override("ops", lambda receipt: None, page_size=16)
    with pytest.raises(OverrideRefused):
        ctx.validate_override("ops", page_size=16)
    proposal = ctx.validate_catch_up("group", generation=3, page_size=16)
    assert proposal.values == {"page_size": 16} and proposal.snapshot.generation == 3
    assert ctx.generation == 0


def test_a_replaced_context_refuses_a_revert(ctx: Any) -> None:
    """A receipt of a replaced context cannot revert into the live one."""
    receipt = ctx.override("ops", schedule_conservativeness=0.5)
    live = publish(ServerArgs(), role="scheduler")
    with pytest.raises(ContextReplacedError):
        receipt.revert()
    assert live.generation == 0


def test_scope_states_and_idempotent_exit(ctx: Any) -> None:
    """A scope reads new, open, closed; exiting twice, or before entering, changes nothing more."""
    scope = ctx.scoped(stream_interval=3)
    assert repr(scope) == "Scope(stream_interval; new)"
    scope.__exit__(None, None, None)
    assert ctx.generation == 0
    with scope:
        assert repr(scope) == "Scope(stream_interval; open)"
        assert ctx.value("stream_interval") == 3
    assert repr(scope) == "Scope(stream_interval; closed)"
    assert (ctx.generation, ctx.value("stream_interval")) == (2, 1)
    ctx.override("ops", stream_interval=5)
    scope.__exit__(None, None, None)
    assert (ctx.generation, ctx.value("stream_interval")) == (3, 5)


def test_group_values_and_repr(ctx: Any) -> None:
    """The config group reads current values by name; the context names its role, generation and overrides."""
    ctx.override("ops", stream_interval=4)
    assert ctx.group_values(["page_size", "stream_interval"]) == {"page_size": 1, "stream_interval": 4}
    assert repr(ctx) == "RuntimeContext(role='scheduler', generation=1, overrides=1)"


def test_failing_subscribers_are_named_in_the_log(ctx: Any) -> None:
    """A failing function is named by its qualified name, a callable object by its repr."""

    def broken(_: Any) -> None:
        raise ValueError("no")

    class Hook:
        def __call__(self, _: Any) -> None:
            raise ValueError("no")

        def __repr__(self) -> str:
            return "<hook>"

    ctx.subscribe(broken)
    ctx.subscribe(Hook())
    with capture_logs() as logs:
        ctx.override("ops", stream_interval=4)
    names = [e["subscriber"] for e in logs if e["event"] == "config.subscriber_failed"]
    assert names == ["test_failing_subscribers_are_named_in_the_log.<locals>.broken", "<hook>"]


def test_an_interrupt_from_the_log_sink_propagates_after_the_commit(ctx: Any) -> None:
    """A KeyboardInterrupt while logging the commit reaches the caller, but the change is live and subscribers heard it."""
    saved = structlog.get_config()

    def interrupt(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
        if event.get("event") == "config.override":
            raise KeyboardInterrupt
        return event

    heard: list[int] = []
    ctx.subscribe(lambda e: heard.append(e.generation))
    structlog.configure(processors=[interrupt, structlog.processors.KeyValueRenderer()])
    try:
        with pytest.raises(KeyboardInterrupt):
            ctx.override("ops", stream_interval=4)
    finally:
        structlog.configure(**saved)
    assert (ctx.generation, ctx.value("stream_interval"), heard) == (1, 4, [1])


def test_a_revert_of_a_revert_is_refused_once_the_field_changed_again(ctx: Any) -> None:
    """Putting an undone override back is refused when a later override covers the field, naming it."""
    undone = ctx.override("ops", stream_interval=4).revert()
    ctx.override("http", stream_interval=6)
    with pytest.raises(RevertConflict) as info:
        undone.revert()
    assert "changed since by 'http' at generation 3" in str(info.value)
    assert ctx.value("stream_interval") == 6


def test_explain_and_counts_inside_and_past_the_log_window() -> None:
    """Within the window nothing is dropped; past it the newest dropped override stands before the ones kept."""
    context = publish(build_record({"overrides_log_limit": 3}), role="scheduler")
    try:
        with capture_logs():
            context.override("a", stream_interval=2)
            assert context.dropped_overrides() == 0
            assert [(o.layer, o.detail, o.value) for o in context.explain("stream_interval")][-1] == (
                "override",
                "a",
                2,
            )
            context.override("b", stream_interval=3)
            for policy in ("lpm", "fcfs", "lpm"):
                context.override("c", schedule_policy=policy)
            context.override("d", stream_interval=4)
        assert [r.generation for r in context.overrides_log()] == [4, 5, 6]
        assert context.dropped_overrides() == 3
        *_, dropped, kept = context.explain("stream_interval")
        assert (dropped.value, dropped.generation, kept.value, kept.generation) == (3, 2, 4, 6)
        assert dropped.detail == "b (newest of 3 dropped from the log window)"
        for i in range(20):  # memory stays bounded: the log never holds more than twice its window
            context.override("e", stream_interval=5 + i)
            assert len(context._state.log) <= 6
    finally:
        reset()


def test_refusing_a_secret_override_never_echoes_the_value() -> None:
    """A refused override of a secret field names the field but shows `***`, not the key."""
    from runtime import get_context, override_server_args
    from sgconf.errors import ConfigError

    with override_server_args(api_key="launch-key"):
        with pytest.raises(ConfigError) as info:
            get_context().override("http.config_overrides", api_key="leaked-key")
    text = "\n".join(info.value.lines())
    assert "'api_key' is not hot" in text and "(got '***')" in text
    assert "leaked-key" not in text and "launch-key" not in text


def test_override_lines_follow_each_change_of_logging_setup(ctx: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The override line goes where structlog is configured now, and to the stdout a print logger sees now."""
    import io

    saved = structlog.get_config()
    try:
        structlog.configure(processors=[structlog.processors.KeyValueRenderer(key_order=["event"])])
        first, second = io.StringIO(), io.StringIO()
        monkeypatch.setattr("sys.stdout", first)
        ctx.override("ops", stream_interval=4)
        monkeypatch.setattr("sys.stdout", second)
        ctx.override("ops", stream_interval=5)
        with capture_logs() as logs:
            ctx.override("ops", stream_interval=6)
    finally:
        structlog.configure(**saved)
    assert "event='config.override'" in first.getvalue() and "'new': 4" in first.getvalue()
    assert "'new': 5" in second.getvalue() and "'new': 4" not in second.getvalue()
    assert "'new': 6" not in second.getvalue()
    assert [(e["event"], e["fields"]) for e in logs] == [("config.override", {"stream_interval": {"old": 5, "new": 6}})]


def test_a_filtered_out_override_line_is_never_rendered(ctx: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Below the logger's level the line's values are not copied; at its level they are, redacted."""
    import logging

    from runtime.overrides import FieldChange

    rendered: list[str] = []
    plain = FieldChange.redacted

    def counting(self: FieldChange) -> dict[str, Any]:
        rendered.append(self.name)
        return plain(self)

    monkeypatch.setattr(FieldChange, "redacted", counting)
    saved = structlog.get_config()
    try:
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
        ctx.override("ops", stream_interval=4)
        assert rendered == []
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO), processors=[])
        with capture_logs() as logs:
            ctx.override("ops", stream_interval=5)
    finally:
        structlog.configure(**saved)
    assert rendered == ["stream_interval"]
    assert logs[0]["fields"] == {"stream_interval": {"old": 4, "new": 5}}


# -- the undo window: which write a revert takes away ---------------------------------------------


def test_reverting_an_older_override_leaves_the_newer_one_live(ctx: Any) -> None:
    """Two overrides of different fields: reverting the older takes only it away; the newer reverts after."""
    older = ctx.override("ops", stream_interval=4)
    newer = ctx.override("ops", schedule_conservativeness=0.5)
    older.revert()
    assert (ctx.value("stream_interval"), ctx.value("schedule_conservativeness")) == (1, 0.5)
    newer.revert()
    assert (ctx.value("stream_interval"), ctx.value("schedule_conservativeness")) == (1, 1.0)
    with pytest.raises(RevertConflict, match="no longer applied"):
        older.revert()


def test_a_reverted_override_cannot_be_reverted_again(ctx: Any) -> None:
    """The newest write, once reverted, is gone from the undo window: a second revert is refused."""
    receipt = ctx.override("ops", stream_interval=4)
    receipt.revert()
    with pytest.raises(RevertConflict, match="no longer applied"):
        receipt.revert()
    assert ctx.value("stream_interval") == 1 and ctx.generation == 2


def test_an_override_folded_out_of_the_undo_window_cannot_be_reverted() -> None:
    """Past `overrides_log_limit` live overrides the oldest fold into the base: reverting one says so."""
    ctx = publish(ServerArgs(overrides_log_limit=4), role="scheduler")
    try:
        receipts = [ctx.override("ops", stream_interval=2 + i) for i in range(6)]
        assert all(w in ctx._state.writes for stack in ctx._state.stacks.values() for w in stack)
        with pytest.raises(RevertConflict, match="no longer applied"):
            receipts[0].revert()
        receipts[-1].revert()
        assert ctx.value("stream_interval") == 6  # the write beneath it shows again
    finally:
        reset()


def _spec_context() -> Any:
    """A context whose speculative tuning is checked by a cross-field rule: draft <= steps * topk + 1."""
    record = build_record(
        {
            "speculative_algorithm": "EAGLE",
            "speculative_num_steps": 3,
            "speculative_eagle_topk": 2,
            "speculative_num_draft_tokens": 4,
        }
    )
    return publish(record, role="scheduler")


def test_a_revert_that_would_break_a_rule_is_refused_and_changes_nothing() -> None:
    """Reverting the steps under a later, larger draft would break the draft bound: refused, nothing changed."""
    ctx = _spec_context()
    try:
        steps = ctx.override("ops", speculative_num_steps=5)
        ctx.override("ops", speculative_num_draft_tokens=9)  # fits 5 * 2 + 1, not 3 * 2 + 1
        generation = ctx.generation
        with pytest.raises(ConfigError, match="exceeds"):
            steps.revert()
        assert ctx.generation == generation
        assert (ctx.value("speculative_num_steps"), ctx.value("speculative_num_draft_tokens")) == (5, 9)
    finally:
        reset()


def test_a_scope_exit_always_restores_even_when_a_later_override_depends_on_it() -> None:
    """A scope's exit never raises: it puts back what lay underneath, whatever was overridden inside it."""
    ctx = _spec_context()
    try:
        with ctx.scoped(speculative_num_steps=5):
            ctx.override("ops", speculative_num_draft_tokens=9)
        assert ctx.value("speculative_num_steps") == 3
    finally:
        reset()


def test_a_revert_of_a_revert_of_a_catch_up_is_checked_like_an_override(ctx: Any) -> None:
    """A catch-up skips the allow-lists (its group checked them); putting its value back later is a new override."""
    published = ctx.value("page_size")
    receipt = ctx.commit(ctx.validate_catch_up("group", generation=1, page_size=16))
    assert ctx.value("page_size") == 16 != published
    undone = receipt.revert()
    assert (ctx.value("page_size"), ctx.generation) == (published, 2)
    with pytest.raises(OverrideRefused, match="page_size"):
        undone.revert()
    assert (ctx.value("page_size"), ctx.generation) == (published, 2)


def test_a_secret_taken_away_by_a_scope_exit_is_never_logged(ctx: Any) -> None:
    """The remove record of a scope's exit redacts a secret field as the override did."""
    with capture_logs() as logs:
        with ctx.scoped(api_key="s3cret-key"):
            pass
    assert logs and "s3cret-key" not in repr(logs)


def test_a_rollback_lists_only_the_fields_it_really_changed(ctx: Any) -> None:
    """A field overridden to an equal value (a new object) is no change for the rollback's log line."""
    with capture_logs() as logs, pytest.raises(OSError, match="refused"):
        ctx.apply_override("ops", _refuse, schedule_conservativeness="1.0", stream_interval=4)
    (rolled,) = [e for e in logs if e["event"] == "config.rollback"]
    assert rolled["fields"] == {"stream_interval": {"old": 4, "new": 1}}


def _refuse(receipt: Any) -> None:
    raise OSError("the effect refused")


def test_override_lines_are_written_by_a_logger_that_cannot_say_what_it_filters(ctx: Any) -> None:
    """structlog's generic BoundLogger has no `is_enabled_for`: the override line is written, not skipped."""
    lines: list[dict[str, Any]] = []

    def keep(_: Any, __: str, event: dict[str, Any]) -> Any:
        lines.append(event)
        raise structlog.DropEvent

    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.BoundLogger, processors=[keep])
    try:
        ctx.override("ops", stream_interval=4)
    finally:
        structlog.configure(**saved)
    (line,) = [e for e in lines if e["event"] == "config.override"]
    assert line["fields"] == {"stream_interval": {"old": 1, "new": 4}}


def test_the_undo_window_folds_only_the_overrides_still_live() -> None:
    """Reverted writes leave the window for good: when it folds past its limit, only live values reach the base."""
    ctx = publish(ServerArgs(overrides_log_limit=4), role="scheduler")
    try:
        ctx.override("ops", schedule_conservativeness=0.5)  # live: folds into the base
        ctx.override("ops", stream_interval=5).revert()  # the newest write taken away
        older = ctx.override("ops", stream_interval=6)
        ctx.override("ops", drain_timeout_s=10.0)
        older.revert()  # a write under a newer one taken away
        for i in range(6):
            ctx.override("ops", drain_timeout_s=11.0 + i)  # past the limit: the oldest live ones fold
        ctx.override("ops", stream_interval=2).revert()
        ctx.override("ops", schedule_conservativeness=0.9).revert()
        assert (ctx.value("stream_interval"), ctx.value("schedule_conservativeness")) == (1, 0.5)
    finally:
        reset()


class _Box:
    """A mutable value a schema carries through a structure hook of its own (the hook hands back what it got)."""

    def __init__(self, items: list[int]) -> None:
        self.items = items


def test_an_override_keeps_no_reference_to_a_mutable_value_it_was_given() -> None:
    """A type carried through the schema's own hook may be mutable: the override keeps a copy, not the caller's object."""
    from sgconf import Schema, setting

    schema = Schema("boxrt", env_prefix="BOXRT_")
    schema.converter.register_structure_hook(_Box, lambda value, _: value if isinstance(value, _Box) else _Box(value))
    schema.namespace("n")(
        type("N", (), {"__annotations__": {"box": _Box}, "box": setting(factory=lambda: _Box([1]), help="x", hot=True)})
    )
    ctx = publish(schema.freeze().load([], env={}).record, role="test")
    try:
        mine = _Box([2])
        ctx.override("ops", box=mine)
        mine.items.append(3)
        assert ctx.value("box") is not mine and ctx.value("box").items == [2]
    finally:
        reset()


def test_one_override_of_a_child_namespace_field_and_another_bag_changes_both() -> None:
    """Several fields at once, one in a child namespace (`exec.graph`): each bag is copied, nothing else is."""
    ctx = publish(ServerArgs(), role="scheduler")
    try:
        before = ctx.snapshot()
        ctx.override("ops", enable_torch_compile=True, stream_interval=7)
        after = ctx.snapshot()
        assert after.exec.graph.enable_torch_compile is True and ctx.value("stream_interval") == 7
        assert before.exec.graph.enable_torch_compile is False
        assert after.memory is before.memory  # an untouched bag is shared
    finally:
        reset()
