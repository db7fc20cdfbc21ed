"""Owned receipts revert through their owner; log lines and subscribers run outside the writer lock; interrupts survive."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from runtime import OverrideReceipt, RevertConflict, get_serving, process, publish
from sgconf import ServerArgs

TIMEOUT = 60


class Owner:
    """An owner that counts the reverts it is asked for, and does them as the context's sanctioned caller."""

    owner_name = "test engine"

    def __init__(self, context: Any) -> None:
        self.context = context
        self.reverted: list[str] = []

    def revert(self, receipt: OverrideReceipt) -> OverrideReceipt:
        self.reverted.append(receipt.source)
        return self.context.revert(receipt, owner=self)


def lock_is_free() -> bool:
    """Whether another thread can take the writer lock now (an RLock is always free to its holder)."""
    got: list[bool] = []

    def probe() -> None:
        taken = process.lock.acquire(timeout=2)
        got.append(taken)
        if taken:
            process.lock.release()

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join(TIMEOUT)
    return got == [True]


@pytest.fixture
def sink() -> Iterator[dict[str, Any]]:
    """structlog routed through one processor: records whether the lock was free, raises what `raise` names."""
    saved = structlog.get_config()
    seen: dict[str, Any] = {"free": {}, "raise": {}}

    def spy(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
        name = event.get("event")
        seen["free"][name] = lock_is_free()
        if name in seen["raise"]:
            raise seen["raise"][name]
        return event

    structlog.configure(processors=[spy, structlog.processors.KeyValueRenderer()])
    yield seen
    structlog.configure(**saved)


# -- every change goes through its owner ------------------------------------------------------


def test_an_owned_receipt_reverts_through_its_owner(ctx: Any) -> None:
    owner = Owner(ctx)
    receipt = ctx.commit(ctx.validate_override("ops", stream_interval=4), owner=owner)
    assert receipt.owner is owner and receipt.owner_name == "test engine" and receipt.record.owner == "test engine"
    undone = receipt.revert()
    assert owner.reverted == ["ops"] and get_serving().stream_interval == 1
    assert undone.owner is owner and undone.record.owner == "test engine"
    undone.revert()  # the revert of a revert belongs to the owner too
    assert owner.reverted == ["ops", "revert:ops"] and get_serving().stream_interval == 4


def test_a_revert_around_the_owner_is_refused_and_changes_nothing(ctx: Any) -> None:
    owner = Owner(ctx)
    receipt = ctx.commit(ctx.validate_override("ops", stream_interval=4), owner=owner)
    for bypass in (
        lambda: ctx.revert(receipt),
        lambda: OverrideReceipt(ctx, receipt.record, receipt.snapshot).revert(),
    ):
        with pytest.raises(RevertConflict) as exc:
            bypass()
        assert "was made through the test engine" in str(exc.value)
        assert "-- call receipt.revert() on the receipt it returned" in str(exc.value)
    assert ctx.generation == 1 and get_serving().stream_interval == 4
    other = Owner(ctx)
    other.owner_name = "another engine"
    with pytest.raises(RevertConflict, match="reverting it from the another engine would skip"):
        ctx.revert(receipt, owner=other)
    plain = ctx.override("ops", stream_interval=5)
    with pytest.raises(RevertConflict, match="made through the context"):
        ctx.revert(plain, owner=owner)
    assert ctx.generation == 2


def test_a_revert_whose_side_effect_fails_rolls_back(ctx: Any) -> None:
    receipt = ctx.override("ops", stream_interval=4)
    heard: list[int] = []
    ctx.subscribe(lambda e: heard.append(e.generation))

    def effect(new: OverrideReceipt) -> None:
        assert get_serving().stream_interval == 1  # the revert is live while its effect runs
        raise OSError("could not undo")

    with capture_logs() as logs, pytest.raises(OSError, match="could not undo"):
        ctx.revert(receipt, effect=effect)
    assert get_serving().stream_interval == 4 and ctx.generation == 3 and heard == []
    assert [r.source for r in ctx.overrides_log()] == ["ops", "revert:ops", "rollback:revert:ops"]
    assert [e["event"] for e in logs] == ["config.rollback"]
    receipt.revert()  # the override is still applied, so it still reverts
    assert get_serving().stream_interval == 1


# -- nothing runs under the writer lock ----------------------------------------------------------


def test_log_lines_and_subscribers_run_outside_the_lock_on_every_path(ctx: Any, sink: dict[str, Any]) -> None:
    heard: list[bool] = []
    ctx.subscribe(lambda e: heard.append(lock_is_free()))

    def fail(receipt: OverrideReceipt) -> None:
        raise OSError("refused")

    receipt = ctx.override("ops", stream_interval=2)
    ctx.apply_override("ops", lambda r: None, stream_interval=3)
    ctx.commit(ctx.validate_override("ops", schedule_policy="lpm"))
    with pytest.raises(OSError):
        ctx.apply_override("ops", fail, stream_interval=4)
    with pytest.raises(OSError):
        ctx.commit(ctx.validate_override("ops", stream_interval=4), effect=fail)
    with ctx.scoped(page_size=16):
        pass
    ctx.revert(ctx.override("ops", stream_interval=9))
    assert receipt.generation == 1
    publish(ServerArgs(), role="scheduler")
    assert heard and all(heard)
    assert set(sink["free"]) >= {"config.override", "config.rollback", "config.republish"}
    assert all(sink["free"].values()), sink["free"]


# -- interrupts are never lost ---------------------------------------------------------------------


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_from_the_log_sink_during_a_rollback_is_raised_once_rolled_back(
    ctx: Any, sink: dict[str, Any], interrupt: type[BaseException]
) -> None:
    sink["raise"]["config.rollback"] = interrupt()

    def fail(receipt: OverrideReceipt) -> None:
        raise OSError("refused")

    with pytest.raises(interrupt) as exc:
        ctx.apply_override("ops", fail, stream_interval=4)
    assert isinstance(exc.value.__cause__, OSError)  # the effect's error is kept with it
    assert get_serving().stream_interval == 1 and ctx.generation == 2
    receipt = ctx.override("ops", stream_interval=5)
    with pytest.raises(interrupt):
        ctx.revert(receipt, effect=fail)
    assert get_serving().stream_interval == 5 and ctx.generation == 5


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_from_the_log_sink_while_publishing_again_is_raised_with_the_new_context_live(
    ctx: Any, sink: dict[str, Any], interrupt: type[BaseException]
) -> None:
    from runtime import get_context

    sink["raise"]["config.republish"] = interrupt()
    record = ServerArgs()
    with pytest.raises(interrupt):
        publish(record, role="scheduler")
    assert get_context() is not ctx and get_context().record is record


@pytest.mark.parametrize("subscribed", [False, True], ids=["no subscriber", "a subscriber"])
def test_an_interrupt_from_the_log_sink_of_an_override_is_raised_after_the_commit(
    ctx: Any, sink: dict[str, Any], subscribed: bool
) -> None:
    heard: list[int] = []
    if subscribed:
        ctx.subscribe(lambda event: heard.append(event.generation))
    sink["raise"]["config.override"] = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        ctx.override("ops", stream_interval=6)
    assert get_serving().stream_interval == 6 and ctx.generation == 1  # committed: only the line was cut short
    assert heard == ([1] if subscribed else [])  # and every subscriber still heard of it


@pytest.mark.parametrize("path", ["override", "revert", "scope exit", "scope entry"])
def test_an_interrupt_from_a_subscriber_on_every_path_is_raised_after_the_commit(ctx: Any, path: str) -> None:
    receipt = ctx.override("ops", stream_interval=2)
    after: list[int] = []
    armed = {"on": path in ("override", "revert", "scope entry")}

    def stop(event: Any) -> None:
        if armed["on"]:
            raise KeyboardInterrupt

    ctx.subscribe(stop)
    ctx.subscribe(lambda e: after.append(e.generation))
    with pytest.raises(KeyboardInterrupt):
        if path == "override":
            ctx.override("ops", stream_interval=3)
        elif path == "revert":
            receipt.revert()
        else:
            with ctx.scoped(page_size=16):
                armed["on"] = True
    assert after, "every later subscriber heard of it"
    expected = {"override": 3, "revert": 1, "scope exit": 2, "scope entry": 2}[path]
    assert get_serving().stream_interval == expected
    assert ctx.snapshot().schedule.page_size == 1  # a scope interrupted either way is gone
