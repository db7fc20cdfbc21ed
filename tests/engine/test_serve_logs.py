"""`sgconf serve` logs: on stderr only, JSON or console, replica lines tagged with their rank,
health polls at debug, the listen URL whatever the level, and a one-line start-up summary."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.support import ServeProcess

pytestmark = pytest.mark.slow  # starts processes or servers: `make test-fast` leaves it out


def _serve(tmp_path: Path, *args: str) -> tuple[str, str]:
    """Run `sgconf serve ARGS` until it answers /health, poll it, ask /server_info, stop it; (stdout, stderr)."""
    with ServeProcess(
        "--max-total-tokens", "512", *args, workdir=tmp_path, merge_output=False, inherit_sgconf_env=False
    ) as server:
        server.wait_healthy()
        for _ in range(3):
            assert httpx.get(f"{server.base}/health", timeout=10).status_code == 200
        assert httpx.get(f"{server.base}/server_info", timeout=30).status_code == 200
        assert server.stop() == 0
    return server.stdout(), server.stderr()


def test_replica_group_logs_json_on_stderr_tagged_by_rank(tmp_path: Path) -> None:
    """With --dp 2 and JSON logs, stdout is empty and every stderr line is an event; replicas carry dp_rank."""
    out, err = _serve(tmp_path, "--dp", "2", "--log-format", "json")
    assert out == ""
    events = [json.loads(line) for line in err.splitlines() if line.strip()]
    starts = [e for e in events if e["event"] == "engine.start"]
    assert sorted(e["dp_rank"] for e in starts) == [0, 1]
    for e in starts:  # the one-line summary: model, pools, tokens, backends, storage
        assert {"model", "pools", "kv_tokens", "attention", "hicache", "cpu_threads"} <= set(e)
        assert e["cpu_threads"] >= 1  # the usable cores but one, shared by this node's two replicas
        assert e["model"] == "tiny" and e["kv_tokens"] == 512 and e["hicache"] == "host tier"
    listens = [e for e in events if e["event"] == "server.listen"]
    assert len(listens) == 1 and listens[0]["url"].startswith("http://127.0.0.1:") and "dp_rank" not in listens[0]
    requests = [e for e in events if e["event"] == "http.request"]
    assert [e["path"] for e in requests] == ["/server_info"]  # the /health polls are at debug


def test_listen_url_is_printed_even_at_warning_level(tmp_path: Path) -> None:
    """--log-level warning hides info events but still prints the listen URL once, on stderr."""
    out, err = _serve(tmp_path, "--log-level", "warning")
    assert out == ""
    listens = [line for line in err.splitlines() if "server.listen" in line]
    assert len(listens) == 1 and "url=http://127.0.0.1:" in listens[0]
    assert "engine.start" not in err and "http.request" not in err
    assert "[DP" not in err  # one process: no rank tag


def test_a_secret_flag_warning_goes_to_stderr_not_stdout(tmp_path: Path) -> None:
    """The warning about a key on the command line is a log event: on stderr, with stdout left empty."""
    out, err = _serve(tmp_path, "--admin-api-key", "cli-key", "--log-level", "warning")
    assert out == ""
    warnings = [line for line in err.splitlines() if "serve.secret_on_command_line" in line]
    assert len(warnings) == 1 and "field=admin_api_key" in warnings[0] and "cli-key" not in err
