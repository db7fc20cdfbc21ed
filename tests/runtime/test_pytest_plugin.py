"""Tests for runtime.pytest_plugin: the server_args fixture, the marker and leak detection."""

from __future__ import annotations

import textwrap

import pytest

from runtime import NotPublishedError, get_schedule

pytest_plugins = ["pytester"]


def run(pytester: pytest.Pytester, body: str) -> pytest.RunResult:
    pytester.makepyfile(test_inner=textwrap.dedent(body))
    return pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider", "-p", "no:anyio", "-p", "no:hypothesispytest")


def test_plugin_is_registered(pytestconfig):
    """The pytest11 entry point names the plugin, which registered the marker here (our suite loads it with -p)."""
    import importlib.metadata

    (entry,) = [e for e in importlib.metadata.entry_points(group="pytest11") if e.name == "sgconf"]
    assert entry.value == "runtime.pytest_plugin"
    assert pytestconfig.pluginmanager.has_plugin("sgconf") or pytestconfig.pluginmanager.has_plugin(entry.value)
    assert any(line.startswith("server_args(") for line in pytestconfig.getini("markers"))


def test_fixture_and_marker(pytester):
    """The fixture publishes a test config; the marker sets fields with or without the fixture; both reset."""
    result = run(
        pytester,
        """
        import pytest
        from runtime import get_schedule, get_serving, get_context, is_published

        def test_fixture(sgconf_context):
            assert sgconf_context is get_context() and sgconf_context.role == "test"
            assert get_schedule().page_size == 1
            sgconf_context.override("http", stream_interval=4)  # owned by the fixture: not a leak

        @pytest.mark.server_args(page_size=16)
        def test_marker_with_fixture(sgconf_context):
            assert get_schedule().page_size == 16 and sgconf_context is get_context()

        @pytest.mark.server_args(page_size=8, stream_interval="2")
        def test_marker_alone():
            assert get_schedule().page_size == 8 and get_serving().stream_interval == 2

        def test_nothing_leaked():
            assert not is_published()
        """,
    )
    result.assert_outcomes(passed=4)


def test_server_args_reads_like_the_record(pytester):
    """`server_args` has an attribute per field: resolved, marker values, overrides and scopes applied, read-only."""
    result = run(
        pytester,
        """
        import pytest

        @pytest.mark.server_args(page_size=16, tp_size=4, dp_size=2, enable_dp_attention=True)
        def test_view(server_args, sgconf_context):
            assert server_args.page_size == 16 and server_args.tp_size == 4
            assert server_args.chunked_prefill_size == sgconf_context.value("chunked_prefill_size") is not None
            assert server_args.attn_tp_size == 2  # a derived member of the parallel namespace
            assert server_args.record.page_size == 16 and server_args.context is sgconf_context
            sgconf_context.override("tuner", schedule_conservativeness=0.5)
            assert server_args.schedule_conservativeness == 0.5  # live: the override shows
            with sgconf_context.scoped(stream_interval=3):
                assert server_args.stream_interval == 3
            assert server_args.stream_interval == 1
            assert "page_size" in dir(server_args)

        def test_unknown_and_read_only(server_args):
            with pytest.raises(AttributeError, match="'page_sise' is not a field of ServerArgs -- did you mean 'page_size'?"):
                server_args.page_sise
            with pytest.raises(AttributeError, match=r"server_args is read-only: cannot set 'page_size' -- use @pytest.mark.server_args"):
                server_args.page_size = 4
            assert not hasattr(server_args, "nope")
        """,
    )
    result.assert_outcomes(passed=2)


def test_leaked_publish_fails_and_is_cleaned(pytester):
    """A test that publishes without cleanup errors at teardown; the next test starts clean."""
    result = run(
        pytester,
        """
        from runtime import publish, is_published
        from sgconf import ServerArgs

        def test_leaks():
            publish(ServerArgs(), role="scheduler")

        def test_after():
            assert not is_published()
        """,
    )
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*test leaked runtime config state: published a new context (role 'scheduler') and left it live "
            "-- the previous context was restored; use the sgconf_context fixture*",
        ]
    )


def test_leaked_override_on_shared_context(pytester):
    """Overrides left on a module-scoped context are caught, and the context's state comes back."""
    result = run(
        pytester,
        """
        import pytest
        from runtime import publish, reset, get_serving
        from sgconf import ServerArgs

        @pytest.fixture(scope="module")
        def shared():
            ctx = publish(ServerArgs(), role="scheduler")
            yield ctx
            reset()

        def test_leaks(shared):
            shared.override("http", stream_interval=5)
            shared.subscribe(print)

        def test_after(shared):
            # the values came back as a new generation: generations never go back
            assert shared.generation == 2 and get_serving().stream_interval == 1
            assert shared.subscribers() == ()

        def test_scoped_is_fine(shared):
            with shared.scoped(stream_interval=7):
                assert get_serving().stream_interval == 7
        """,
    )
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(
        ["*left overrides on the live context (generation 0 -> 1); left the subscribers changed (+1)*"]
    )


def test_unrestored_install_is_caught(pytester):
    """An override_server_args install never restored is reported and undone."""
    result = run(
        pytester,
        """
        from runtime import override_server_args, is_published
        from runtime.testing import install_depth

        def test_leaks():
            override_server_args(page_size=4).install()

        def test_after():
            assert not is_published() and install_depth() == 0
        """,
    )
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*1 override_server_args install(s) never restored*"])


def test_marker_rejects_positional_args(pytester):
    """The marker takes keywords only."""
    result = run(
        pytester,
        """
        import pytest

        @pytest.mark.server_args(16)
        def test_bad():
            pass
        """,
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*takes field=value keywords only, got (16,)*"])


def test_marker_with_a_bad_field_names_it(pytester):
    """A marker naming an unknown field fails the test with the field and a suggestion, without a traceback."""
    result = run(
        pytester,
        """
        import pytest
        from runtime import is_published

        @pytest.mark.server_args(page_sise=16)
        def test_bad():
            pass

        def test_after():
            assert not is_published()
        """,
    )
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*@pytest.mark.server_args(...) is invalid: invalid configuration: 1 problem",
            "*$.page_sise: unknown field 'page_sise' -- did you mean 'page_size'? (from override_server_args)",
        ]
    )
    result.stdout.no_fnmatch_line("*During handling*")


def test_outer_state_is_untouched():
    """After the inner runs, nothing is published in this process."""
    with pytest.raises(NotPublishedError):
        get_schedule()


@pytest.mark.slow  # starts a process: `make test-fast` leaves it out
def test_plugin_costs_nothing_where_nothing_is_published(pytester):
    """In a project that never reads a config, the plugin imports none of our packages and fails nothing."""
    pytester.makepyfile(
        test_plain=textwrap.dedent(
            """
            import sys

            def test_one():
                assert "runtime.context" not in sys.modules and "sgconf" not in sys.modules

            def test_two():
                assert "runtime.accessors" not in sys.modules
            """
        )
    )
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "-p", "no:randomly")
    result.assert_outcomes(passed=2)
