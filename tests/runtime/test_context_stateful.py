"""Stateful property test: random publish / override / scoped / install / revert sequences keep the invariants.

Invariants checked after every step: the bags equal the model this test keeps (the
resolved values with every live write laid on top in commit order), the generation
rises by exactly one per change (scope exits and reverts included), an invalid override
changes nothing, scopes close in any order taking exactly their own values, and
restoring an install brings back the exact context (same object, same state) that was
live before it.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from structlog.testing import capture_logs

from runtime import (
    NotPublishedError,
    RevertConflict,
    get_context,
    get_schedule,
    get_serving,
    is_published,
    override_server_args,
    publish,
    reset,
)
from sgconf import build_record
from sgconf.errors import ConfigError
from sgconf.record import record_to_dict
from sgconf.resolution import resolve_once

HOT_VALUES = {
    "stream_interval": st.integers(1, 8),
    "schedule_policy": st.sampled_from(["fcfs", "lpm", "random", "dfs-weight"]),
    "schedule_conservativeness": st.sampled_from([0.0, 0.5, 1.0, 2.5]),
    "log_level": st.sampled_from(["debug", "info", "warning"]),
    "load_balance_method": st.sampled_from(["round_robin", "shortest_queue"]),
}
hot_overrides = st.dictionaries(st.sampled_from(sorted(HOT_VALUES)), st.just(None), min_size=1, max_size=3).flatmap(
    lambda d: st.fixed_dictionaries({k: HOT_VALUES[k] for k in d})
)
# values given as strings, as HTTP would send them
as_strings = st.sampled_from([{"stream_interval": "3"}, {"schedule_conservativeness": "0.25"}])
invalid_overrides = st.sampled_from(
    [
        {"page_sise": 2},  # unknown
        {"page_size": 16},  # not hot
        {"stream_interval": "abc"},  # wrong type
        {"schedule_policy": "xx"},  # bad choice
        {"stream_interval": 2, "page_size": 8},  # one bad field spoils all
        {"speculative_num_steps": 2},  # cross-field rule: no algorithm
    ]
)
launch_fields = st.fixed_dictionaries(
    {}, optional={"page_size": st.sampled_from([1, 4, 16]), "stream_interval": st.integers(1, 4)}
)


@attrs.frozen
class Model:
    """What the test expects the live context to be."""

    context: Any  # the live RuntimeContext, None when nothing is published
    base: dict[str, Any]
    writes: tuple[tuple[Any, dict[str, Any], int], ...]  # (receipt or scope, values, generation), commit order
    generation: int
    log_len: int
    receipts: tuple[Any, ...]

    @property
    def values(self) -> dict[str, Any]:
        out = dict(self.base)
        for _, values, _ in self.writes:
            out.update(values)
        return out

    def top(self, name: str) -> tuple[Any, dict[str, Any], int] | None:
        for write in reversed(self.writes):
            if name in write[1]:
                return write
        return None


def resolved_values(record: Any) -> dict[str, Any]:
    return record_to_dict(resolve_once(record).values)


class ContextMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        reset()
        self.model = Model(None, {}, (), 0, 0, ())
        self.frames: list[tuple[str, Any, Model, Any]] = []  # (kind, handle, saved model, saved state)

    # -- helpers -------------------------------------------------------------------------

    def published(self) -> bool:
        return self.model.context is not None

    def changed(self, receipt: Any, writes: tuple[tuple[Any, dict[str, Any], int], ...]) -> None:
        m = self.model
        receipts = m.receipts if receipt is None else (*m.receipts, receipt)
        self.model = attrs.evolve(
            m, writes=writes, generation=m.generation + 1, log_len=m.log_len + 1, receipts=receipts
        )
        if receipt is not None:
            assert receipt.generation == self.model.generation

    def committed(self, receipt: Any, values: dict[str, Any]) -> None:
        self.changed(receipt, (*self.model.writes, (receipt, values, self.model.generation + 1)))

    def open_scopes(self) -> list[int]:
        """Indexes of the frames that are scopes on the live context (above the innermost install)."""
        out = []
        for i in range(len(self.frames) - 1, -1, -1):
            if self.frames[i][0] == "install":
                break
            out.append(i)
        return out

    # -- rules ---------------------------------------------------------------------------

    @precondition(lambda self: not any(kind == "scoped" for kind, *_ in self.frames))
    @rule(fields=launch_fields, role=st.sampled_from(["scheduler", "test"]))
    def publish(self, fields: dict[str, Any], role: str) -> None:
        record = build_record(fields)
        with capture_logs():
            ctx = publish(record, role=role)
        self.model = Model(ctx, resolved_values(record), (), 0, 0, ())

    @precondition(published)
    @rule(values=hot_overrides)
    def override_valid(self, values: dict[str, Any]) -> None:
        with capture_logs():
            receipt = get_context().override("prop", **values)
        self.committed(receipt, values)

    @precondition(published)
    @rule(values=as_strings)
    def override_from_strings(self, values: dict[str, str]) -> None:
        with capture_logs():
            receipt = get_context().override("http", **values)
        converted = {k: (int(v) if k == "stream_interval" else float(v)) for k, v in values.items()}
        self.committed(receipt, converted)

    @precondition(published)
    @rule(values=invalid_overrides)
    def override_invalid(self, values: dict[str, Any]) -> None:
        ctx = get_context()
        state = ctx._state
        with pytest.raises(ConfigError):
            ctx.override("prop", **values)
        assert ctx._state is state  # nothing changed, not even a copy

    @precondition(published)
    @rule(data=st.data())
    def revert(self, data: st.DataObject) -> None:
        if not self.model.receipts:
            return
        receipt = data.draw(st.sampled_from(self.model.receipts))
        m = self.model
        names = [c.name for c in receipt.changes]
        if receipt.record.kind == "set":
            live = [w for w in m.writes if w[0] is receipt]
            conflict = not live or any(m.top(n) is not live[0] for n in names)
        else:  # a revert: reverting it puts the values back unless a newer write covers them
            conflict = any((top := m.top(n)) is not None and top[2] > receipt.generation for n in names)
        if conflict:
            state = get_context()._state
            with pytest.raises(RevertConflict):
                receipt.revert()
            assert get_context()._state is state
            return
        with capture_logs():
            back = receipt.revert()
        if receipt.record.kind == "set":
            self.changed(back, tuple(w for w in m.writes if w[0] is not receipt))
        else:
            self.committed(back, {c.name: c.old for c in receipt.changes})

    @precondition(published)
    @rule(values=st.sampled_from([{"page_size": 8}, {"page_size": 2, "stream_interval": 5}, {"tp_size": 2}]))
    def enter_scope(self, values: dict[str, Any]) -> None:
        ctx = get_context()
        cm = ctx.scoped(**values)
        saved = (self.model, ctx._state)
        with capture_logs():
            cm.__enter__()
        self.frames.append(("scoped", cm, *saved))
        self.changed(None, (*self.model.writes, (cm, values, self.model.generation + 1)))

    @precondition(lambda self: bool(self.open_scopes()))
    @rule(data=st.data())
    def close_any_scope(self, data: st.DataObject) -> None:
        """Scopes on the live context close in any order, each taking exactly its own values away."""
        at = data.draw(st.sampled_from(self.open_scopes()))
        _, cm, _, _ = self.frames.pop(at)
        with capture_logs():
            cm.__exit__(None, None, None)
        self.changed(None, tuple(w for w in self.model.writes if w[0] is not cm))

    @rule(values=st.sampled_from([{}, {"page_size": 4}, {"stream_interval": 3, "page_size": 2}]))
    def install(self, values: dict[str, Any]) -> None:
        base = get_context().record if self.published() else None
        handle = override_server_args(**values)
        saved = (self.model, get_context()._state if self.published() else None)
        ctx = handle.install()
        self.frames.append(("install", handle, *saved))
        record = build_record(values, base=base)
        self.model = Model(ctx, resolved_values(record), (), 0, 0, ())

    @precondition(lambda self: bool(self.frames) and self.frames[-1][0] == "install")
    @rule()
    def restore_install(self) -> None:
        _, handle, saved_model, saved_state = self.frames.pop()
        with capture_logs():
            handle.restore()
        self.model = saved_model
        if saved_model.context is None:
            assert not is_published()
        else:
            assert get_context() is saved_model.context
            assert get_context()._state is saved_state

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def matches_model(self) -> None:
        if not self.published():
            with pytest.raises(NotPublishedError):
                get_schedule()
            return
        ctx = get_context()
        values = self.model.values
        assert ctx is self.model.context
        assert ctx.snapshot().flat() == values
        assert dict(ctx._state.flat) == values
        # the fingerprint moved commit by commit is the one computed from the values afresh
        assert ctx.fingerprint() == ctx.snapshot().fingerprint()
        assert ctx.generation == self.model.generation == ctx.snapshot().generation
        assert len(ctx.overrides_log()) == self.model.log_len
        assert get_schedule().page_size == values["page_size"]
        assert get_serving().stream_interval == values["stream_interval"]

    def teardown(self) -> None:
        while self.frames:
            if self.frames[-1][0] == "install":
                self.restore_install()
            else:
                _, cm, _, _ = self.frames.pop()
                with capture_logs():
                    cm.__exit__(None, None, None)
        reset()


ContextMachine.TestCase.settings = settings(
    max_examples=30, stateful_step_count=20, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestContextMachine = ContextMachine.TestCase
