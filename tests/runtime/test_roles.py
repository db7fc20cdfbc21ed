"""Tests for runtime.roles: role namespace sets in off, record and enforce modes."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from runtime import (
    ROLE_NAMESPACE_SETS,
    RoleViolation,
    get_context,
    get_model,
    get_schedule,
    get_serving,
    max_speculative_num_draft_tokens,
    override_server_args,
    publish,
    reset,
)
from runtime.roles import GuardedView, clear_recorded, mode_from_env, recorded_reads
from runtime.snapshot import Snapshot, snapshot_class
from sgconf import ServerArgs
from sgconf.errors import ConfigError
from sgconf.serving.namespaces import SERVING

BAG_NAMES = tuple(SERVING.top_level_namespaces())


@pytest.fixture(autouse=True)
def _fresh_recording():
    clear_recorded()
    yield
    clear_recorded()
    reset()


def test_role_sets_cover_known_roles():
    """The documented roles exist and only name real namespaces."""
    assert {"scheduler", "tokenizer", "detokenizer", "dp_controller", "test"} <= set(ROLE_NAMESPACE_SETS)
    for names in ROLE_NAMESPACE_SETS.values():
        assert names <= set(BAG_NAMES)
    assert ROLE_NAMESPACE_SETS["scheduler"] == frozenset(BAG_NAMES)


@pytest.mark.parametrize(
    ("raw", "mode"), [(None, "off"), ("", "off"), ("off", "off"), (" Record ", "record"), ("ENFORCE", "enforce")]
)
def test_mode_from_env(raw, mode):
    """Modes are read case-insensitively; unset means off."""
    env = {} if raw is None else {"SGCONF_ROLE_NAMESPACES": raw}
    assert mode_from_env(env) == mode


def test_bad_mode_is_an_error(monkeypatch):
    """A bad mode is an error at publish, never a silent off; nothing gets published."""
    monkeypatch.setenv("SGCONF_ROLE_NAMESPACES", "enforced")
    with pytest.raises(ConfigError) as info:
        publish(ServerArgs(), role="tokenizer")
    assert str(info.value) == (
        "bad role namespace mode\n  $env.SGCONF_ROLE_NAMESPACES: expected one of 'off', 'record', 'enforce', "
        "got 'enforced' (from env SGCONF_ROLE_NAMESPACES)"
    )
    with pytest.raises(RuntimeError):
        get_context()


def test_off_mode_hands_out_the_snapshot(monkeypatch):
    """In off mode accessors return the snapshot's own bags: no wrapper, no cost."""
    monkeypatch.delenv("SGCONF_ROLE_NAMESPACES", raising=False)
    ctx = publish(ServerArgs(), role="tokenizer")
    assert type(ctx.snapshot()) is snapshot_class(SERVING) and isinstance(ctx.snapshot(), Snapshot)
    get_schedule()  # outside the tokenizer set, but off mode does not check
    assert recorded_reads() == frozenset()


def test_enforce_mode_refuses_reads_outside_the_set(monkeypatch):
    """In enforce mode a read outside the role's set raises RoleViolation; allowed reads work."""
    monkeypatch.setenv("SGCONF_ROLE_NAMESPACES", "enforce")
    ctx = publish(ServerArgs(), role="detokenizer")
    assert isinstance(ctx.snapshot(), GuardedView)
    assert get_serving().stream_interval == 1
    assert get_model().model_path == "tiny"
    with pytest.raises(RoleViolation) as info:
        get_schedule()
    assert str(info.value) == (
        "role 'detokenizer' read namespace 'schedule' (get_schedule()), outside its set ('model', 'observability', "
        "'serving') -- read it in a role that owns it, or add 'schedule' to the role with "
        "schema.role('detokenizer', namespaces=[...])"
    )
    assert isinstance(info.value, PermissionError)
    with pytest.raises(RoleViolation):
        max_speculative_num_draft_tokens()  # derived accessors read the spec bag
    with pytest.raises(RoleViolation):
        ctx.snapshot().schedule  # noqa: B018


def test_enforce_mode_follows_overrides(monkeypatch):
    """A guarded view is rebuilt per commit, so reads see overrides."""
    monkeypatch.setenv("SGCONF_ROLE_NAMESPACES", "enforce")
    ctx = publish(ServerArgs(), role="detokenizer")
    ctx.override("http", stream_interval=5)
    assert get_serving().stream_interval == 5
    assert ctx.snapshot().generation == 1


def test_record_mode_writes_pairs_at_once(monkeypatch, tmp_path):
    """Record mode remembers each (role, namespace) pair once and appends it to the out file at once."""
    out = tmp_path / "roles.tsv"
    monkeypatch.setenv("SGCONF_ROLE_NAMESPACES", "record")
    monkeypatch.setenv("SGCONF_ROLE_NAMESPACES_OUT", str(out))
    publish(ServerArgs(), role="tokenizer")
    get_schedule()
    get_schedule()
    get_serving()
    assert out.read_text() == "tokenizer\tschedule\ntokenizer\tserving\n"
    assert recorded_reads() == {("tokenizer", "schedule"), ("tokenizer", "serving")}


def test_record_mode_refuses_an_unwritable_out_file(monkeypatch, tmp_path):
    """An out file that cannot be appended to is an error at publish, not at some later read."""
    out = tmp_path / "missing" / "roles.tsv"
    monkeypatch.setenv("SGCONF_ROLE_NAMESPACES", "record")
    monkeypatch.setenv("SGCONF_ROLE_NAMESPACES_OUT", str(out))
    with pytest.raises(ConfigError) as info:
        publish(ServerArgs(), role="tokenizer")
    assert info.value.lines() == [
        f"$env.SGCONF_ROLE_NAMESPACES_OUT: cannot append to {str(out)!r} (No such file or directory) "
        "-- point it at a writable file, or unset it (from env SGCONF_ROLE_NAMESPACES_OUT)"
    ]
    with pytest.raises(RuntimeError):
        get_context()


def test_override_server_args_honours_the_mode(monkeypatch):
    """Test installs use role 'test', which may read everything even under enforce."""
    monkeypatch.setenv("SGCONF_ROLE_NAMESPACES", "enforce")
    with override_server_args(page_size=8):
        assert get_schedule().page_size == 8
    with override_server_args(role="detokenizer"), pytest.raises(RoleViolation):
        get_schedule()


@pytest.mark.slow  # starts a process: `make test-fast` leaves it out
def test_record_mode_reports_to_stderr_at_exit(tmp_path):
    """A process in record mode prints its pairs to stderr when it exits."""
    code = textwrap.dedent(
        """
        from runtime import publish, get_schedule, get_spec
        from sgconf import ServerArgs
        publish(ServerArgs(device="cpu"), role="scheduler")
        get_spec(); get_schedule(); get_schedule()
        """
    )
    env = {"SGCONF_ROLE_NAMESPACES": "record", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert done.stderr.endswith(
        "sgconf role namespaces read (role namespace):\n  scheduler schedule\n  scheduler spec\n"
    )
