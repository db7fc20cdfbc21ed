"""minirt on sgconf: its own schema, prefix and CLI, a hot override that evicts, and the test helpers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from minirt import SCHEMA, AdapterPool, get_api, get_lora

from runtime import RoleViolation, get_context, override_server_args, publish, reset
from sgconf import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def test_override_server_args_and_a_hot_override_evict() -> None:
    """A test config with three slots; lowering max_loras evicts the oldest adapters at once."""
    with override_server_args(schema=SCHEMA, max_loras=3, preload=["a", "b"]) as ctx:
        pool = AdapterPool()
        pool.use("c")
        assert pool.resident() == ["a", "b", "c"]
        receipt = ctx.override("autoscaler", max_loras=1)
        assert pool.resident() == ["c"] and pool.evicted == ["a", "b"]
        receipt.revert()
        pool.use("a")
        assert get_lora().max_loras == 3 and pool.resident() == ["c", "a"]
        pool.close()


def test_the_fixture_publishes_the_minirt_schema(sgconf_context) -> None:
    """The plugin's fixture publishes minirt's defaults (conftest names the schema)."""
    assert sgconf_context.schema is SCHEMA and get_lora().max_loras == 2
    assert sgconf_context.resolved_dict()["api"] == {"host": "127.0.0.1", "port": 8100, "token": None}


@pytest.mark.server_args(max_loras=5, policy="fifo")
def test_the_marker_sets_fields() -> None:
    """The marker's fields are live for the whole test."""
    assert get_lora().max_loras == 5 and get_context().value("policy") == "fifo"


def test_the_worker_role_may_not_read_the_api(monkeypatch: pytest.MonkeyPatch) -> None:
    """In enforce mode the adapter worker reads lora and cache, and is refused the api namespace."""
    monkeypatch.setenv("SGCONF_ROLE_NAMESPACES", "enforce")
    publish(SCHEMA.load([], env={}).record, role="adapter_worker")
    try:
        assert get_lora().max_loras == 2
        with pytest.raises(RoleViolation, match="role 'adapter_worker' read namespace 'api'"):
            get_api()
    finally:
        reset()


def _minirt(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(
        [sys.executable, "-m", "minirt", *args],
        capture_output=True,
        text=True,
        env=environ,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


@pytest.mark.slow  # starts a process: `make test-fast` leaves it out
def test_python_m_minirt_run_and_show() -> None:
    """The `python -m minirt` entry loads MINIRT_* env and flags, and reports bad input without a traceback."""
    out = _minirt("run", "--use", "a,b,c", "--shrink-to", "1", MINIRT_MAX_LORAS="3")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "resident: a, b, c (max_loras 3)",
        "generation 1: max_loras 1, evicted a, b",
        "resident: c",
    ]
    bad = _minirt("show", "--max-loras", "0")
    assert (bad.returncode, bad.stdout) == (2, "")
    assert (
        bad.stderr
        == "minirt: invalid configuration: 1 problem\n  $.lora.max_loras: must be > 0, got 0 (from --max-loras)\n"
    )


def test_a_secrets_directory_sets_the_token_with_its_file_as_provenance(tmp_path: Path) -> None:
    """One file per field: the token comes from `<dir>/token`, below the environment, and is never shown."""
    (tmp_path / "token").write_text("s3cret-from-file\n", encoding="utf-8")
    (tmp_path / "unrelated").write_text("not ours", encoding="utf-8")
    loaded = SCHEMA.load([], env={"MINIRT_SECRETS_DIR": str(tmp_path)})
    assert loaded.record.token == "s3cret-from-file"
    assert loaded.winner("token").describe() == f"from secrets:{tmp_path / 'token'}"
    assert "s3cret" not in repr(loaded) and "s3cret" not in repr(loaded.chain("token"))
    above = SCHEMA.load([], env={"MINIRT_SECRETS_DIR": str(tmp_path), "MINIRT_TOKEN": "from-env-token"})
    assert above.record.token == "from-env-token"
    (tmp_path / "port").write_text("http", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"\$\.api\.port: .*from secrets:"):
        SCHEMA.load([], env={"MINIRT_SECRETS_DIR": str(tmp_path)})


def test_the_secrets_directory_is_listed_among_the_sources_and_refuses_a_token_given_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`SCHEMA.sources` and `--help` say where the directory sits; `token` and `MINIRT_TOKEN` together are refused."""
    assert [s.name for s in SCHEMA.sources] == ["file", "secrets", "env", "cli"]
    assert SCHEMA.main(["show", "--help"]) == 0
    assert "precedence: defaults < config file < secrets < env < flags." in " ".join(capsys.readouterr().out.split())
    (tmp_path / "token").write_text("s3cret-one\n", encoding="utf-8")
    (tmp_path / "MINIRT_TOKEN").write_text("s3cret-two\n", encoding="utf-8")
    with pytest.raises(ConfigError) as refused:
        SCHEMA.load([], env={"MINIRT_SECRETS_DIR": str(tmp_path)})
    assert refused.value.lines() == [
        f"$.api.token: 'token' is given twice (also as {tmp_path / 'MINIRT_TOKEN'}) -- keep one"
        f" (from secrets:{tmp_path / 'token'})"
    ]
    assert "s3cret" not in str(refused.value)
