"""`sgconf serve` as a real process: uvicorn on a free loopback port, JSON logs, clean config errors."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import httpx

from engine.serve import load_serve_record


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_enables_hicache_unless_told_otherwise() -> None:
    """serve turns the hierarchical cache on by default, but an explicit choice or a disabled radix cache wins."""
    assert load_serve_record([], env={}).enable_hierarchical_cache is True
    assert load_serve_record(["--no-enable-hierarchical-cache"], env={}).enable_hierarchical_cache is False
    assert load_serve_record(["--disable-radix-cache"], env={}).enable_hierarchical_cache is False


def test_real_uvicorn_server_with_json_logs() -> None:
    """The console script serves /health and /generate over loopback and logs one JSON object per line."""
    port = free_port()
    args = ["serve", "--port", str(port), "--log-format", "json", "--max-total-tokens", "512"]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from sgconf.cli import main; sys.exit(main(sys.argv[1:]))", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "server did not start"
            time.sleep(0.2)
        r = httpx.post(f"{base}/generate", json={"text": "hi", "max_new_tokens": 4, "ignore_eos": True}, timeout=30)
        assert r.status_code == 200 and len(r.json()["output_ids"]) == 4
        info = httpx.get(f"{base}/server_info", timeout=10).json()
        assert info["config"]["memory"]["enable_hierarchical_cache"] is True
        assert info["config"]["serving"]["port"] == port
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    requests = [e for e in events if e["event"] == "http.request"]
    assert {(e["method"], e["path"], e["status"]) for e in requests} >= {("POST", "/generate", 200), ("GET", "/server_info", 200)}
    assert all("timestamp" in e and "level" in e for e in requests)


def test_bad_flags_exit_2_without_traceback() -> None:
    """A bad value is reported with its path and flag, exit status 2, no traceback."""
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from sgconf.cli import main; sys.exit(main(sys.argv[1:]))", "serve", "--page-size", "3"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert "$.schedule.page_size" in proc.stderr
    assert "Traceback" not in proc.stderr
