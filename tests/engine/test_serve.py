"""`sgconf serve` as a real process: uvicorn on a free loopback port, JSON logs, clean config errors."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import httpx
import pytest

from engine.serve import load_serve_record, serve_parser
from tests.support import ServeProcess, free_port

pytestmark = pytest.mark.slow  # starts processes or servers: `make test-fast` leaves it out


def test_serve_enables_hicache_unless_told_otherwise() -> None:
    """serve turns the hierarchical cache on by default, but an explicit choice or a disabled radix cache wins."""
    assert load_serve_record([], env={}).enable_hierarchical_cache is True
    assert load_serve_record(["--no-enable-hierarchical-cache"], env={}).enable_hierarchical_cache is False
    assert load_serve_record(["--disable-radix-cache"], env={}).enable_hierarchical_cache is False


def test_serve_default_is_shown_and_credited_truthfully(capsys) -> None:
    """`serve --help` says HiCache is on for serve, and provenance credits serve's default, not a flag."""
    from sgconf.cli import load_from_args
    from sgconf.serving import SERVING, main

    assert main(["serve", "--help"]) == 0
    flat = " ".join(capsys.readouterr().out.split())
    assert "enable the HiCache host tier (default: true for sgconf serve, unless --disable-radix-cache)" in flat
    ns = serve_parser().parse_args([])
    assert (
        load_from_args(ns, {}, schema=SERVING).record.enable_hierarchical_cache is False
    )  # the declared default elsewhere
    from sgconf import explain, resolve_once

    record = load_serve_record([], env={})
    chain = explain(record, "enable_hierarchical_cache", resolve_once(record))
    assert chain[-1].describe() == "from sgconf serve's default (on unless --disable-radix-cache)"


def test_serve_takes_aliases_and_shipped_model_names() -> None:
    """`--tp`, `--dp`, `--model` with a shipped example name reach the serve record, and the engine runs it."""
    from engine import Engine

    record = load_serve_record(
        ["--model", "small-dense", "--tp", "1", "--dp", "1", "--max-total-tokens", "256"], env={}
    )
    assert (record.model_path, record.tp_size, record.dp_size) == ("small-dense", 1, 1)
    with Engine(record) as engine:
        assert engine.shape.num_hidden_layers == 4
        assert len(engine.generate("hi", max_new_tokens=3, ignore_eos=True).token_ids) == 3


def test_real_uvicorn_server_with_json_logs() -> None:
    """The console script serves /health and /generate over loopback and logs one JSON object per line."""
    with ServeProcess("--log-format", "json", "--max-total-tokens", "512") as server:
        server.wait_healthy()
        r = httpx.post(
            f"{server.base}/generate", json={"text": "hi", "max_new_tokens": 4, "ignore_eos": True}, timeout=30
        )
        assert r.status_code == 200 and len(r.json()["output_ids"]) == 4
        info = httpx.get(f"{server.base}/server_info", timeout=10).json()
        assert info["config"]["memory"]["enable_hierarchical_cache"] is True
        assert info["config"]["serving"]["port"] == server.port
        assert server.stop() == 0
    events = [json.loads(line) for line in server.stdout().splitlines() if line.startswith("{")]
    requests = [e for e in events if e["event"] == "http.request"]
    assert {(e["method"], e["path"], e["status"]) for e in requests} >= {
        ("POST", "/generate", 200),
        ("GET", "/server_info", 200),
    }
    assert all("timestamp" in e and "level" in e for e in requests)


def test_bad_flags_exit_2_without_traceback() -> None:
    """A bad value is reported with its path and flag, exit status 2, no traceback."""
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from sgconf.serving import main; sys.exit(main(sys.argv[1:]))",
            "serve",
            "--page-size",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "$.schedule.page_size" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_settings_the_engine_cannot_honour_are_refused_before_the_port_is_bound(capsys, monkeypatch) -> None:
    """pp, ep and tp above 1 and cuda on a torch without it are refused with the flag and source, exit 2, port free."""
    import pytest
    import torch

    from runtime import is_published
    from sgconf.serving import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setenv("SGCONF_EP_SIZE", "2")
    port = free_port()
    assert main(["serve", "--pp", "2", "--device", "cuda", "--port", str(port)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "sgconf: settings the embedded engine cannot honour on this machine",
        "  $.parallel.pp_size: the embedded engine runs one rank, so it cannot pipeline layers over pp_size 2 "
        "-- start it with --pp-size 1 (from --pp)",
        "  $.parallel.ep_size: the embedded engine runs one rank, so it cannot spread experts over ep_size 2 "
        "-- start it with --ep-size 1 (from env SGCONF_EP_SIZE)",
        "  $.device.device: device 'cuda' was asked for, and this torch is built without CUDA "
        "-- use --device cpu (or auto) (from --device)",
    ]
    assert not is_published()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # never bound by the refused server
    with pytest.raises(Exception, match="cannot split attention heads over tp_size 2"):
        from engine import Engine

        Engine(load_serve_record(["--tp", "2"], env={}))
    assert not is_published()
