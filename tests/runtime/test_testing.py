"""Tests for runtime.testing.override_server_args."""

from __future__ import annotations

import pytest

from runtime import (
    NotPublishedError,
    get_context,
    get_schedule,
    get_server_args,
    get_serving,
    override_server_args,
    publish,
    reset,
)
from runtime.testing import install_depth
from sgconf import ServerArgs
from sgconf.errors import ConfigError


@pytest.fixture
def live():
    ctx = publish(ServerArgs(), role="scheduler")
    ctx.override("http", stream_interval=3)
    yield ctx
    reset()


def test_context_manager_publishes_and_restores_exactly(live):
    """Inside: a fresh test context; after: the same context object, state and subscribers as before."""
    sub = live.subscribe(lambda e: None)
    state = live._state
    with override_server_args(page_size=16) as ctx:
        assert ctx is get_context() and ctx is not live
        assert ctx.role == "test" and ctx.generation == 0
        assert get_schedule().page_size == 16
        assert get_server_args().page_size == 16
        assert get_serving().stream_interval == 1  # the record, not the live overrides
        ctx.override("http", stream_interval=9)
    assert get_context() is live
    assert live._state is state and live.generation == 1
    assert live.subscribers() == (sub,)
    assert get_serving().stream_interval == 3 and get_schedule().page_size == 1


def test_restores_on_exception(live):
    """The previous context comes back when the block raises."""
    with pytest.raises(ZeroDivisionError), override_server_args(page_size=4):
        1 / 0  # noqa: B018
    assert get_context() is live and get_schedule().page_size == 1


def test_nesting_accumulates_and_unwinds(live):
    """Nested installs layer their fields and unwind one by one."""
    with override_server_args(page_size=16):
        with override_server_args(stream_interval=7):
            assert get_schedule().page_size == 16 and get_serving().stream_interval == 7
            assert install_depth() == 2
        assert get_schedule().page_size == 16 and get_serving().stream_interval == 1
    assert get_context() is live and install_depth() == 0


def test_unknown_names_fail_before_anything_changes(live):
    """An unknown field raises UnknownFieldError-style ConfigError and leaves the live context alone."""
    with pytest.raises(ConfigError) as info:
        override_server_args(page_sise=16).install()
    assert "unknown field 'page_sise' -- did you mean 'page_size'? (from override_server_args)" in str(info.value)
    assert get_context() is live and install_depth() == 0
    with pytest.raises(ConfigError, match="must be a power of two"):
        with override_server_args(page_size=3):
            pass  # pragma: no cover
    assert get_context() is live


def test_install_and_restore_methods():
    """install()/restore() work without a with-block, from nothing published back to nothing."""
    ov = override_server_args(page_size=2)
    ctx = ov.install()
    assert ov.installed and ov.context is ctx and get_schedule().page_size == 2
    with pytest.raises(RuntimeError, match="already installed"):
        ov.install()
    ov.restore()
    assert not ov.installed
    with pytest.raises(NotPublishedError):
        get_schedule()
    with pytest.raises(RuntimeError, match="was not installed"):
        ov.restore()


def test_out_of_order_restore_takes_exactly_its_own_fields():
    """Restoring an outer install under an inner one leaves exactly the inner one's fields live."""
    outer = override_server_args(page_size=2, schedule_policy="lpm")
    inner = override_server_args(page_size=4, stream_interval=3)
    outer.install()
    inner.install()
    outer.restore()
    assert (get_schedule().page_size, get_schedule().schedule_policy, get_serving().stream_interval) == (4, "fcfs", 3)
    assert get_context() is inner.context and not outer.installed
    inner.restore()
    with pytest.raises(NotPublishedError):
        get_schedule()


def test_restore_after_reset_is_a_noop():
    """runtime.reset() forgets open installs; restoring one afterwards does nothing."""
    ov = override_server_args(page_size=2)
    ov.install()
    reset()
    ov.restore()
    with pytest.raises(NotPublishedError):
        get_schedule()


def test_decorator_form():
    """override_server_args works as a decorator."""

    @override_server_args(page_size=32)
    def read():
        return get_schedule().page_size

    assert read() == 32
    with pytest.raises(NotPublishedError):
        get_schedule()


def test_decorated_function_may_recurse():
    """Each call of a decorated function installs its own override, so recursion nests."""

    @override_server_args(stream_interval=4)
    def depth(n):
        return install_depth() if n == 0 else depth(n - 1)

    assert depth(2) == 3
    assert depth(0) == 1
    assert install_depth() == 0


def test_role_and_model_options():
    """role and model are options, not fields."""
    with override_server_args(role="tokenizer", model={"max_position_embeddings": 99}) as ctx:
        assert ctx.role == "tokenizer" and ctx.model == {"max_position_embeddings": 99}
        assert ctx.snapshot().model.context_length == 99


def test_every_unknown_name_is_listed():
    """The ConfigError for unknown names lists each one with a suggestion."""
    with pytest.raises(ConfigError) as info:
        override_server_args(page_sise=1, strem_interval=2).install()
    assert info.value.lines() == [
        "$.page_sise: unknown field 'page_sise' -- did you mean 'page_size'? (from override_server_args)",
        "$.strem_interval: unknown field 'strem_interval' -- did you mean 'stream_interval'? (from override_server_args)",
    ]
