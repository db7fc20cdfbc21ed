"""`sgconf serve` as a real process: busy ports, SIGTERM/SIGINT with a grace period and a flush, a separate admin listener."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow  # starts processes or servers: `make test-fast` leaves it out

KEY = "signal-admin-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
START_TIMEOUT_S = 180  # a busy 2-core machine builds an engine slowly; never a measure of speed


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(*args: str, **env: str) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-c",
        "import sys; from sgconf.serving import main; sys.exit(main(sys.argv[1:]))",
        "serve",
        *args,
    ]
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore", **env},
    )


def wait_healthy(proc: subprocess.Popen, base: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.2)


def event_names(out: str) -> list[str]:
    """The JSON log events in order (replica processes share the pipe, so lines may run together)."""
    return re.findall(r'"event": "([^"]+)"', out)


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> tuple[int, list[str]]:
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=120)
    return proc.returncode, event_names(out)


def test_a_busy_port_is_one_line_before_anything_is_built() -> None:
    """A port in use exits 1 with one line naming the address and the flag, without building the engine."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        proc = start("--port", str(port), "--log-format", "json")
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert out.strip().splitlines() == [
        f"sgconf serve: cannot listen on 127.0.0.1:{port} (public routes): address already in use "
        "-- stop what holds it or pick another --port"
    ]


def test_sigterm_flushes_write_back_and_exits_0_with_a_separate_admin_listener(tmp_path: Path) -> None:
    """Admin routes live only on the admin port; SIGTERM stores the pages waiting for write-back and exits 0."""
    port, admin_port = free_port(), free_port()
    proc = start(
        "--port",
        str(port),
        "--admin-host",
        "127.0.0.1",
        "--admin-port",
        str(admin_port),
        "--log-format",
        "json",
        "--max-total-tokens",
        "1024",
        "--page-size",
        "4",
        SGCONF_ADMIN_API_KEY=KEY,
    )
    try:
        base, admin = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin_port}"
        wait_healthy(proc, base)
        body = {
            "hicache_storage_backend": "file",
            "hicache_storage_backend_extra_config_json": json.dumps({"dir": str(tmp_path)}),
            "hicache_write_policy": "write_back",
        }
        assert httpx.put(f"{base}/hicache/storage-backend", json=body, headers=AUTH, timeout=60).status_code == 404
        r = httpx.put(f"{admin}/hicache/storage-backend", json=body, headers=AUTH, timeout=60)
        assert r.status_code == 200, r.text
        assert httpx.post(f"{admin}/generate", json={"text": "x", "max_new_tokens": 1}, timeout=60).status_code == 404
        prompt = "write-back pages stay in host memory until they are flushed " * 2
        g = httpx.post(f"{base}/generate", json={"text": prompt, "max_new_tokens": 4, "ignore_eos": True}, timeout=120)
        assert g.status_code == 200
        stats = httpx.get(f"{admin}/hicache/storage-backend", headers=AUTH, timeout=30).json()["stats"]
        assert stats["backed_up_pages"] > 0 and stats["storage_writes"] == 0  # waiting for write-back
        files_before = [p for p in tmp_path.rglob("*") if p.is_file()]
    except BaseException:
        proc.kill()
        raise
    code, names = stop(proc)
    assert code == 0
    assert [p for p in tmp_path.rglob("*") if p.is_file()] != files_before  # the flush wrote the pages
    assert names.index("server.stopping") < names.index("engine.stop")


def test_a_request_in_flight_finishes_within_the_grace_period() -> None:
    """SIGINT while a request runs: /health says stopping, new requests get 503, the running one completes, exit 0."""
    port = free_port()
    proc = start(
        "--port",
        str(port),
        "--log-format",
        "json",
        "--max-total-tokens",
        "2048",
        "--shutdown-grace-s",
        "120",
        "--log-requests",
    )
    result: dict = {}
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(proc, base)

        def long_request() -> None:
            r = httpx.post(
                f"{base}/generate", json={"text": "go", "max_new_tokens": 1500, "ignore_eos": True}, timeout=300
            )
            result["status"], result["tokens"] = r.status_code, len(r.json().get("output_ids", []))

        worker = threading.Thread(target=long_request)
        worker.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while httpx.get(f"{base}/health", timeout=10).json()["running"] < 1:
            assert time.monotonic() < deadline, "the request never started"
        proc.send_signal(signal.SIGINT)
        # the listener stays open while the request runs: a load balancer learns that the server is going
        while (health := httpx.get(f"{base}/health", timeout=10)).status_code == 200:
            assert time.monotonic() < deadline + START_TIMEOUT_S, "the server never said it was stopping"
        assert (health.status_code, health.json()["status"], health.json()["inflight"]) == (503, "stopping", 1)
        refused = httpx.post(f"{base}/generate", json={"text": "late", "max_new_tokens": 1}, timeout=10)
        assert (refused.status_code, refused.json()["detail"]) == (
            503,
            "the server is stopping -- retry on another server",
        )
        worker.join(timeout=300)
        closed_by = time.monotonic() + START_TIMEOUT_S
        while True:  # once nothing is in flight the listener closes
            try:
                assert httpx.get(f"{base}/health", timeout=5).json()["status"] == "stopping"
            except httpx.TransportError:
                break
            assert time.monotonic() < closed_by, "the listener never closed"
            time.sleep(0.05)
    except BaseException:
        proc.kill()
        raise
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0
    assert result == {"status": 200, "tokens": 1500}
    events = event_names(out)
    assert events.index("server.stopping") < events.index("generate.done")


def test_a_request_past_the_grace_period_is_answered_503() -> None:
    """With a grace period of 0 the running request is aborted with a 503 naming the shutdown, and the exit is 0."""
    port = free_port()
    proc = start("--port", str(port), "--max-total-tokens", "2048", "--shutdown-grace-s", "0")
    result: dict = {}
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(proc, base)

        def long_request() -> None:
            r = httpx.post(
                f"{base}/generate", json={"text": "go", "max_new_tokens": 1900, "ignore_eos": True}, timeout=300
            )
            result["status"], result["detail"] = r.status_code, r.json().get("detail")

        worker = threading.Thread(target=long_request)
        worker.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while httpx.get(f"{base}/health", timeout=10).json()["running"] < 1:
            assert time.monotonic() < deadline, "the request never started"
        proc.send_signal(signal.SIGTERM)
        worker.join(timeout=300)
    except BaseException:
        proc.kill()
        raise
    proc.communicate(timeout=120)
    assert proc.returncode == 0
    assert result["status"] == 503
    assert result["detail"].startswith("the server is shutting down and its grace period ran out")


def test_replica_group_stops_on_sigterm_with_exit_0() -> None:
    """--dp-size 2: SIGTERM stops the listener, then every replica, and the controller exits 0."""
    port = free_port()
    proc = start("--port", str(port), "--dp-size", "2", "--log-format", "json", "--max-total-tokens", "512")
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(proc, base)
        r = httpx.post(f"{base}/generate", json={"text": "hi", "max_new_tokens": 3, "ignore_eos": True}, timeout=120)
        assert r.status_code == 200
    except BaseException:
        proc.kill()
        raise
    code, names = stop(proc)
    assert code == 0
    assert "server.stopping" in names and names.index("server.stopping") < names.index("dp.stop")
