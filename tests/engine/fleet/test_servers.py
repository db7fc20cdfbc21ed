"""Fleet members as real `sgconf serve` processes on a real etcd: ACK/NACK, start-up, store outage, a kill mid-apply."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.fleet.records import ServerStatus
from engine.fleet.store import FleetStore
from sgconf.serving import main as sgconf_main
from tests.engine.fleet.processes import Etcd, Server, wait_until

pytestmark = pytest.mark.slow  # starts processes or servers: `make test-fast` leaves it out

WAIT = "120"  # seconds `fleet set --wait` may take on a busy machine; never a measure of speed


def fleet(*argv: str) -> int:
    return sgconf_main(["fleet", *argv])


def status(etcd: Etcd, name: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    fleet("status", name, "--store", etcd.url, "--format", "json")
    return json.loads(capsys.readouterr().out)


def statuses(etcd: Etcd, name: str) -> dict[str, ServerStatus]:
    async def go() -> list[ServerStatus]:
        async with FleetStore(etcd.url) as store:
            return await store.statuses(name)

    return {s.server: s for s in asyncio.run(go())}


def config(server: Server) -> dict[str, Any]:
    return server.info()["config"]


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    try:
        yield started
    finally:
        for s in started:
            s.stop()


def test_each_server_checks_its_own_capacity_and_status_shows_the_split(
    etcd: Etcd, fleet_name: str, servers: list[Server], capsys: pytest.CaptureFixture[str]
) -> None:
    big = Server(fleet_name, etcd.url, "--max-running-requests", "64", server_id="big")
    small = Server(fleet_name, etcd.url, "--max-running-requests", "16", server_id="small")
    servers += [big, small]
    big.wait_healthy()
    small.wait_healthy()
    assert (
        fleet("set", fleet_name, "max_running_requests=32", "schedule_policy=lpm", "--store", etcd.url, "--wait", WAIT)
        == 1
    )
    report = status(etcd, fleet_name, capsys)
    rows = {r["server"]: r for r in report["servers"]}
    assert (rows["big"]["state"], rows["big"]["version"], rows["big"]["applied_version"]) == ("ack", 1, 1)
    assert (rows["small"]["state"], rows["small"]["version"], rows["small"]["applied_version"]) == ("nack", 1, None)
    assert (
        "'max_running_requests' may be at most 16, the capacity planned at start-up (got 32)" in rows["small"]["reason"]
    )
    assert report["summary"] == "1 of 2 running server(s) run version 1; 1 refused it (keeping version launch)"
    assert (config(big)["schedule"]["max_running_requests"], config(big)["schedule"]["schedule_policy"]) == (32, "lpm")
    assert (config(small)["schedule"]["max_running_requests"], config(small)["schedule"]["schedule_policy"]) == (
        16,
        "fcfs",
    )
    assert small.health()["fleet"]["state"] == "nack"
    # the operator lowers the change until every server takes it
    assert fleet("set", fleet_name, "--unset", "max_running_requests", "--store", etcd.url, "--wait", WAIT) == 0
    assert status(etcd, fleet_name, capsys)["in_sync"] is True
    assert (config(big)["schedule"]["max_running_requests"], config(small)["schedule"]["schedule_policy"]) == (
        64,
        "lpm",
    )
    overrides = big.info()["overrides"]
    assert [o["source"] for o in overrides] == ["fleet." + fleet_name + "@v1", "fleet." + fleet_name + "@v2"]


def test_a_server_runs_the_desired_version_before_it_serves(etcd: Etcd, fleet_name: str, servers: list[Server]) -> None:
    """The very first answer of a new member already comes from the fleet's version."""
    assert fleet("set", fleet_name, "stream_interval=3", "schedule_conservativeness=0.5", "--store", etcd.url) == 0
    server = Server(fleet_name, etcd.url)
    servers.append(server)
    first = server.wait_healthy()
    assert first["status"] == "ok"
    assert {k: first["fleet"][k] for k in ("link", "desired_version", "applied_version", "state")} == {
        "link": "ok",
        "desired_version": 1,
        "applied_version": 1,
        "state": "ack",
    }
    assert config(server)["serving"]["stream_interval"] == 3
    assert statuses(etcd, fleet_name)[server.server_id].state == "ack"


def test_a_store_outage_keeps_the_last_good_config_and_the_server_resyncs(
    tmp_path: Path, servers: list[Server], capsys: pytest.CaptureFixture[str]
) -> None:
    store = Etcd(tmp_path).start()
    try:
        server = Server("outage", store.url)
        servers.append(server)
        server.wait_healthy()
        assert fleet("set", "outage", "stream_interval=2", "--store", store.url, "--wait", WAIT) == 0
        store.stop()
        health = wait_until(
            "the fleet link to be degraded", lambda: (h := server.health())["status"] == "degraded" and h
        )
        assert health["fleet"]["link"] == "degraded"
        assert health["detail"].startswith("the fleet link is degraded: ") and store.url in health["detail"]
        assert health["detail"].endswith(
            "meanwhile this server keeps version 1 of fleet 'outage' and resyncs when the store answers"
        )
        # still serving, with the last good config
        r = httpx.post(f"{server.base}/generate", json={"text": "hi", "max_new_tokens": 2}, timeout=60)
        assert r.status_code == 200
        assert config(server)["serving"]["stream_interval"] == 2
        store.start()
        assert fleet("set", "outage", "stream_interval=4", "--store", store.url, "--wait", WAIT) == 0
        assert config(server)["serving"]["stream_interval"] == 4
        wait_until("the link to come back", lambda: server.health()["status"] == "ok")
        assert server.health()["fleet"]["link"] == "ok"
    finally:
        store.stop()


def test_a_server_killed_while_applying_comes_back_at_a_consistent_version(
    etcd: Etcd, fleet_name: str, servers: list[Server]
) -> None:
    """A storage attach drains behind a long request; the server dies then, and restarts at the desired version."""
    server = Server(fleet_name, etcd.url, "--max-total-tokens", "4096", server_id="a")
    servers.append(server)
    server.wait_healthy()

    def long_request() -> None:
        with contextlib.suppress(httpx.TransportError):  # the server is killed under it
            httpx.post(
                f"{server.base}/generate", json={"text": "x", "max_new_tokens": 1500, "ignore_eos": True}, timeout=600
            )

    long = threading.Thread(target=long_request, daemon=True)
    long.start()
    wait_until("the request to run", lambda: server.health()["running"] == 1, every_s=0.02)
    assert fleet("set", fleet_name, "hicache_storage_backend=memory", "stream_interval=2", "--store", etcd.url) == 0
    wait_until(
        "the apply to start", lambda: (s := statuses(etcd, fleet_name).get("a")) and s.state == "applying", every_s=0.02
    )
    server.kill()  # mid-apply: the drain is still waiting for the long request
    assert statuses(etcd, fleet_name)["a"].state == "applying"
    again = Server(fleet_name, etcd.url, "--max-total-tokens", "4096", server_id="a")
    servers.append(again)
    first = again.wait_healthy()
    assert (first["fleet"]["applied_version"], first["fleet"]["state"]) == (1, "ack")
    cfg = config(again)
    assert (cfg["memory"]["hicache_storage_backend"], cfg["serving"]["stream_interval"]) == ("memory", 2)
    s = statuses(etcd, fleet_name)["a"]
    assert (s.state, s.version, s.applied_version, s.pid) == ("ack", 1, 1, again.proc.pid)


def test_a_replica_group_takes_each_version_on_every_rank(etcd: Etcd, fleet_name: str, servers: list[Server]) -> None:
    """With --dp-size 2 a version goes through the group's two-phase round: every rank at one generation."""
    assert fleet("set", fleet_name, "schedule_policy=lpm", "--store", etcd.url) == 0
    server = Server(fleet_name, etcd.url, "--dp-size", "2")
    servers.append(server)
    assert server.wait_healthy()["fleet"]["state"] == "ack"
    assert (
        fleet(
            "set",
            fleet_name,
            "hicache_storage_backend=memory",
            "stream_interval=2",
            "--store",
            etcd.url,
            "--wait",
            WAIT,
        )
        == 0
    )
    info = server.info()
    assert (info["config"]["memory"]["hicache_storage_backend"], info["config"]["serving"]["stream_interval"]) == (
        "memory",
        2,
    )
    assert len(info["ranks"]) == 3
    assert len({r["generation"] for r in info["ranks"]}) == 1
