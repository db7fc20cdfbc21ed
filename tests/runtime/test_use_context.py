"""Contexts of their own: `create_context`, `use_context` blocks (nesting, errors, threads) and `withdraw`."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from runtime import NotPublishedError, create_context, get_context, publish, reset, use_context, withdraw
from runtime.serving import get_schedule
from sgconf import build_record


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    reset()
    yield
    reset()


def record(page_size: int):  # type: ignore[no-untyped-def]
    return build_record({"page_size": page_size})


def test_a_created_context_is_not_published_and_is_read_only_inside_its_block() -> None:
    own = create_context(record(16), role="test")
    with pytest.raises(NotPublishedError):
        get_context()
    with use_context(own) as entered:
        assert entered is own and get_context() is own and get_schedule().page_size == 16
    with pytest.raises(NotPublishedError):
        get_context()


def test_a_block_restores_the_published_context_by_identity_even_on_error() -> None:
    published = publish(record(4), role="test")
    own = create_context(record(16), role="test")
    with pytest.raises(RuntimeError, match="boom"):
        with use_context(own):
            assert get_schedule().page_size == 16
            raise RuntimeError("boom")
    assert get_context() is published and get_schedule().page_size == 4


def test_blocks_nest_and_unwind_in_order() -> None:
    a, b = create_context(record(8), role="test"), create_context(record(32), role="test")
    with use_context(a):
        with use_context(b):
            assert get_context() is b and get_schedule().page_size == 32
        assert get_context() is a and get_schedule().page_size == 8
    with pytest.raises(NotPublishedError):
        get_context()


def test_a_block_is_the_calling_threads_only() -> None:
    published = publish(record(4), role="test")
    own = create_context(record(16), role="test")
    seen: list[int] = []
    with use_context(own):
        thread = threading.Thread(target=lambda: seen.append(get_schedule().page_size))
        thread.start()
        thread.join()
        assert get_schedule().page_size == 16
    assert seen == [4] and get_context() is published


def test_a_later_publish_never_replaces_a_created_context() -> None:
    own = create_context(record(16), role="test")
    publish(record(4), role="test")
    with use_context(own):
        assert get_schedule().page_size == 16
    assert get_schedule().page_size == 4


def test_use_context_refuses_what_is_not_a_context() -> None:
    with pytest.raises(
        TypeError, match=r"use_context\(\) takes a RuntimeContext, got dict -- make one with create_context\(\)"
    ):
        with use_context({}):  # type: ignore[arg-type]
            pass


def test_withdraw_stops_publishing_only_the_published_context() -> None:
    published = publish(record(4), role="test")
    other = create_context(record(16), role="test")
    assert withdraw(other) is False
    assert get_context() is published
    assert withdraw(published) is True
    with pytest.raises(NotPublishedError):
        get_context()
    assert withdraw(published) is False


def test_a_schema_naming_no_log_limit_keeps_the_last_256_overrides() -> None:
    from sgconf import Schema, setting

    schema = Schema("nolimit", env_prefix="NOLIMIT_")
    schema.namespace("n")(type("N", (), {"__annotations__": {"f": int}, "f": setting(0, help="x", hot=True)}))
    ctx = publish(schema.record(), role="test")
    for i in range(1, 301):
        ctx.override("ops", f=i)
    log = ctx.overrides_log()
    assert len(log) == 256
    assert log[-1].changes[0].new == 300 and log[0].changes[0].new == 45
    chain = ctx.explain("f")  # the same window, and one stand-in for what it dropped
    assert [o.layer for o in chain] == ["default"] + ["override"] * 257
    assert chain[1].value == 44 and "newest of 44 dropped from the log window" in chain[1].detail
    assert [o.value for o in chain[2:]] == list(range(45, 301))


def test_a_committed_proposal_is_announced_to_subscribers_once() -> None:
    ctx = publish(record(4), role="test")
    events: list[object] = []
    ctx.subscribe(events.append)
    receipt = ctx.commit(ctx.validate_override("ops", schedule_conservativeness=0.5))
    assert get_schedule().schedule_conservativeness == 0.5
    assert [e.generation for e in events] == [receipt.generation] == [1]  # type: ignore[attr-defined]
