"""`sgconf serve` as a real process: busy ports, SIGTERM/SIGINT with a grace period and a flush, a separate admin listener."""

from __future__ import annotations

import json
import re
import signal
import socket
import threading
from pathlib import Path

import httpx
import pytest

from tests.support import ServeProcess, free_port, wait_until

pytestmark = pytest.mark.slow  # starts processes or servers: `make test-fast` leaves it out

KEY = "signal-admin-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


def event_names(out: str) -> list[str]:
    """The JSON log events in order (replica processes share the output file, so lines may run together)."""
    return re.findall(r'"event": "([^"]+)"', out)


def long_request_running(server: ServeProcess, max_new_tokens: int) -> tuple[threading.Thread, list[httpx.Response]]:
    """A /generate of `max_new_tokens` in a thread, returned once the server runs it; its answer lands in the list."""
    answers: list[httpx.Response] = []
    body = {"text": "go", "max_new_tokens": max_new_tokens, "ignore_eos": True}
    worker = threading.Thread(
        target=lambda: answers.append(httpx.post(f"{server.base}/generate", json=body, timeout=300))
    )
    worker.start()
    wait_until("the request to start", lambda: httpx.get(f"{server.base}/health", timeout=10).json()["running"] >= 1)
    return worker, answers


def test_a_busy_port_is_one_line_before_anything_is_built() -> None:
    """A port in use exits 1 with one line naming the address and the flag, without building the engine."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        server = ServeProcess("--log-format", "json", port=port)
        code = server.proc.wait(timeout=120)
    assert code == 1
    assert server.stdout().strip().splitlines() == [
        f"sgconf serve: cannot listen on 127.0.0.1:{port} (public routes): address already in use "
        "-- stop what holds it or pick another --port"
    ]


def test_sigterm_flushes_write_back_and_exits_0_with_a_separate_admin_listener(tmp_path: Path) -> None:
    """Admin routes live only on the admin port; SIGTERM stores the pages waiting for write-back and exits 0."""
    admin_port = free_port()
    server = ServeProcess(
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
        env={"SGCONF_ADMIN_API_KEY": KEY},
    )
    with server:
        base, admin = server.base, f"http://127.0.0.1:{admin_port}"
        server.wait_healthy()
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
        assert server.stop() == 0
    names = event_names(server.stdout())
    assert [p for p in tmp_path.rglob("*") if p.is_file()] != files_before  # the flush wrote the pages
    assert names.index("server.stopping") < names.index("engine.stop")


def test_a_request_in_flight_finishes_within_the_grace_period() -> None:
    """SIGINT while a request runs: /health says stopping, new requests get 503, the running one completes, exit 0."""
    server = ServeProcess(
        "--log-format", "json", "--max-total-tokens", "2048", "--shutdown-grace-s", "120", "--log-requests"
    )
    with server:
        base = server.base
        server.wait_healthy()
        worker, answers = long_request_running(server, 1500)
        server.proc.send_signal(signal.SIGINT)

        # the listener stays open while the request runs: a load balancer learns that the server is going
        def stopping() -> httpx.Response | None:
            r = httpx.get(f"{base}/health", timeout=10)
            return None if r.status_code == 200 else r

        health = wait_until("the server to say it is stopping", stopping)
        assert (health.status_code, health.json()["status"], health.json()["inflight"]) == (503, "stopping", 1)
        refused = httpx.post(f"{base}/generate", json={"text": "late", "max_new_tokens": 1}, timeout=10)
        assert (refused.status_code, refused.json()["detail"]) == (
            503,
            "the server is stopping -- retry on another server",
        )
        worker.join(timeout=300)

        def closed() -> bool:  # once nothing is in flight the listener closes
            try:
                assert httpx.get(f"{base}/health", timeout=5).json()["status"] == "stopping"
            except httpx.TransportError:
                return True
            return False

        wait_until("the listener to close", closed)
        assert server.proc.wait(timeout=120) == 0
    assert answers[0].status_code == 200 and len(answers[0].json()["output_ids"]) == 1500
    events = event_names(server.stdout())
    assert events.index("server.stopping") < events.index("generate.done")


def test_a_request_past_the_grace_period_is_answered_503() -> None:
    """With a grace period of 0 the running request is aborted with a 503 naming the shutdown, and the exit is 0."""
    server = ServeProcess("--max-total-tokens", "2048", "--shutdown-grace-s", "0")
    with server:
        server.wait_healthy()
        worker, answers = long_request_running(server, 1900)
        server.proc.send_signal(signal.SIGTERM)
        worker.join(timeout=300)
        assert server.proc.wait(timeout=120) == 0
    assert answers[0].status_code == 503
    assert answers[0].json()["detail"].startswith("the server is shutting down and its grace period ran out")


def test_replica_group_stops_on_sigterm_with_exit_0() -> None:
    """--dp-size 2: SIGTERM stops the listener, then every replica, and the controller exits 0."""
    with ServeProcess("--dp-size", "2", "--log-format", "json", "--max-total-tokens", "512") as server:
        server.wait_healthy()
        body = {"text": "hi", "max_new_tokens": 3, "ignore_eos": True}
        assert httpx.post(f"{server.base}/generate", json=body, timeout=120).status_code == 200
        assert server.stop() == 0
    names = event_names(server.stdout())
    assert "server.stopping" in names and names.index("server.stopping") < names.index("dp.stop")
