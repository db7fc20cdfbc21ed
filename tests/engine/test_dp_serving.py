"""`--dp-size 2`: two engine replica processes behind the data-parallel controller, over real HTTP.

One controller (in this process, role `dp_controller`, enforced) is reused for a sequence
of checks, because starting replicas is the slow part; the stop test runs `sgconf serve`
as a real process and signals it.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import ServeProcess

pytestmark = pytest.mark.slow  # starts processes or servers: `make test-fast` leaves it out

ADMIN = {"Authorization": "Bearer admin-key"}


@pytest.fixture
def dp_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Any, Path]]:
    """A 2-replica controller with enforced role namespaces; replica i works in tmp/replica<i>."""
    from fastapi.testclient import TestClient

    from engine.dp.controller import DPController
    from engine.dp.group_backend import ReplicaGroupBackend
    from engine.http.app import create_app
    from runtime import override_server_args

    monkeypatch.setenv("SGCONF_ROLE_NAMESPACES", "enforce")
    for i in range(2):
        (tmp_path / f"replica{i}").mkdir()
    with override_server_args(
        role="dp_controller", dp_size=2, enable_hierarchical_cache=True, admin_api_key="admin-key"
    ):
        controller = DPController(workdirs=lambda i: str(tmp_path / f"replica{i}"))
        try:
            with TestClient(create_app(ReplicaGroupBackend(controller))) as client:
                yield controller, client, tmp_path
        finally:
            controller.shutdown()


def _backends(client: Any) -> list[Any]:
    info = client.get("/server_info").json()
    return [r["values"]["hicache_storage_backend"] for r in info["ranks"]]


def test_two_replicas_route_propagate_and_report(dp_server: tuple[Any, Any, Path]) -> None:
    """Routing, attach success and failure, overrides, server_info, role enforcement and replica death."""
    from runtime import get_memory, get_parallel
    from runtime.errors import RoleViolation

    controller, client, tmp = dp_server

    # the controller reads only its namespaces: memory is outside them
    assert get_parallel().dp_size == 2
    with pytest.raises(RoleViolation, match="role 'dp_controller' read namespace 'memory'"):
        get_memory()

    # round robin over both replicas; each answers with real tokens
    ranks = []
    for _ in range(4):
        r = client.post("/generate", json={"text": "hello", "max_new_tokens": 3})
        assert r.status_code == 200, r.text
        assert len(r.json()["output_ids"]) == 3
        ranks.append(r.json()["meta_info"]["dp_rank"])
    assert ranks == [0, 1, 0, 1]

    # server_info: every rank at generation 0 with one fingerprint
    info = client.get("/server_info").json()
    assert [(r["rank"], r["role"], r["alive"], r["generation"]) for r in info["ranks"]] == [
        (0, "dp_controller", True, 0),
        (1, "scheduler", True, 0),
        (2, "scheduler", True, 0),
    ]
    assert len({r["fingerprint"] for r in info["ranks"]}) == 1
    assert info["config_group"]["fingerprint_mismatch"] is None

    # induced failure on replica 1: its working directory holds a file where the storage dir would go
    (tmp / "replica1" / "kv").write_text("not a directory")
    body = {"hicache_storage_backend": "file", "hicache_storage_backend_extra_config_json": '{"dir": "kv"}'}
    r = client.put("/hicache/storage-backend", json=body, headers=ADMIN)
    assert r.status_code == 400, r.text
    assert r.json()["errors"] == [
        "rank 2: $.memory.hicache_storage_backend_extra_config.dir: "
        "'hicache_storage_backend_extra_config.dir' = 'kv' exists and is not a directory -- pick a directory path"
    ]
    assert _backends(client) == [None, None, None]
    assert not (tmp / "replica0" / "kv").exists()  # replica 0 prepared, then released what it created

    # success: both replicas (and the controller) report the backend, at one generation
    (tmp / "replica1" / "kv").unlink()
    r = client.put("/hicache/storage-backend", json=body, headers=ADMIN)
    assert r.status_code == 200, r.text
    assert r.json()["generation"] == 1
    assert r.json()["consistent"] is True
    assert _backends(client) == ["file", "file", "file"]
    assert (tmp / "replica0" / "kv").is_dir() and (tmp / "replica1" / "kv").is_dir()

    # a bad value is refused by the controller first: 422, nothing changes
    r = client.post("/config/overrides", json={"schedule_conservativeness": -1}, headers=ADMIN)
    assert r.status_code == 422
    assert r.json()["errors"] == [
        "rank 0: $.schedule.schedule_conservativeness: must be in [0, 100], got -1.0 (from override http.config_overrides)"
    ]

    # a hot routing field changes on every rank; the controller routes by it at once
    r = client.post("/config/overrides", json={"load_balance_method": "shortest_queue"}, headers=ADMIN)
    assert r.status_code == 200, r.text
    assert {s["generation"] for s in r.json()["ranks"]} == {2}
    assert get_parallel().load_balance_method == "shortest_queue"
    picks = [client.post("/generate", json={"text": "hi", "max_new_tokens": 1}).json()["meta_info"]["dp_rank"]]
    assert picks == [0]  # both idle: the lowest index wins

    r = client.delete("/hicache/storage-backend", headers=ADMIN)
    assert r.status_code == 200, r.text
    assert _backends(client) == [None, None, None]

    # a replica dies: /health turns 503 and names it
    assert client.get("/health").status_code == 200
    victim = controller.replicas[1]
    os.kill(victim.pid, signal.SIGKILL)
    victim.process.join(10)
    r = client.get("/health")
    assert r.status_code == 503
    assert r.json()["detail"] == "replica(s) 1 exited -- restart them with POST /replicas/<index>/restart"

    # while it is down no config change can be all-or-nothing: refused at once with the fix-it
    r = client.post("/config/overrides", json={"load_balance_method": "round_robin"}, headers=ADMIN)
    assert r.status_code == 503
    assert r.json()["detail"] == (
        "cannot change the config while replica(s) 1 (exit code -9) are down: every replica must take part"
        " -- restart them with POST /replicas/<index>/restart, then retry"
    )
    assert client.post("/replicas/1/restart").status_code == 401
    r = client.post("/replicas/0/restart", headers=ADMIN)
    assert r.status_code == 409
    assert r.json()["detail"] == (
        f"replica 0 is running (pid {controller.replicas[0].pid}) -- only an exited replica can be restarted;"
        " bring a running one up to date with POST /replicas/0/resync"
    )
    r = client.post("/replicas/1/resync", headers=ADMIN)
    assert (r.status_code, r.json()["detail"]) == (
        409,
        "replica 1 exited (exit code -9) -- start a new one with POST /replicas/1/restart",
    )
    r = client.post("/replicas/2/restart", headers=ADMIN)
    assert (r.status_code, r.json()["detail"]) == (404, "there is no replica 2 -- replicas are numbered 0 to 1")

    # restarted, it replays the three committed rounds and rejoins at the group's generation
    r = client.post("/replicas/1/restart", headers=ADMIN)
    assert r.status_code == 200, r.text
    assert (r.json()["status"], r.json()["generation"], r.json()["alive"]) == ("restarted", 3, True)
    assert r.json()["pid"] != victim.pid
    assert client.get("/health").status_code == 200
    info = client.get("/server_info").json()
    assert [(row["alive"], row["generation"]) for row in info["ranks"]] == [(True, 3)] * 3
    assert len({row["fingerprint"] for row in info["ranks"]}) == 1

    # and takes part in the next round and in routing again
    r = client.post("/config/overrides", json={"load_balance_method": "round_robin"}, headers=ADMIN)
    assert r.status_code == 200, r.text
    assert [s["generation"] for s in r.json()["ranks"]] == [4, 4, 4]
    picks = [
        client.post("/generate", json={"text": "hi", "max_new_tokens": 1}).json()["meta_info"]["dp_rank"]
        for _ in range(2)
    ]
    assert sorted(picks) == [0, 1]

    # the replicas fall behind (an override only the controller took): rounds are refused with the route
    # to fix it, and resync brings each running replica to the controller's generation in one round
    from runtime import get_context

    get_context().override("test.local", load_balance_method="shortest_queue")
    r = client.post("/config/overrides", json={"schedule_policy": "lpm"}, headers=ADMIN)
    assert r.status_code == 409, r.text  # reason "diverged": the server's state, not the input, is at fault
    assert r.json()["errors"][0] == (
        "rank 1: $generation: this rank is at generation 4, the coordinator at 5 -- the ranks diverged;"
        " resync this rank from the coordinator (POST /replicas/<index>/resync on a data-parallel server)"
        " or publish the same config on every rank"
    )
    assert client.post("/replicas/0/resync").status_code == 401
    r = client.post("/replicas/2/resync", headers=ADMIN)
    assert (r.status_code, r.json()["detail"]) == (404, "there is no replica 2 -- replicas are numbered 0 to 1")
    for index in (0, 1):
        r = client.post(f"/replicas/{index}/resync", headers=ADMIN)
        assert r.status_code == 200, r.text
        assert (r.json()["status"], r.json()["replica"], r.json()["generation"]) == ("resynced", index, 5)
        assert r.json()["fingerprint"] == get_context().fingerprint()
    info = client.get("/server_info").json()
    assert [(row["generation"], row["fingerprint"]) for row in info["ranks"]] == [(5, get_context().fingerprint())] * 3
    r = client.post("/config/overrides", json={"schedule_policy": "lpm"}, headers=ADMIN)
    assert r.status_code == 200, r.text
    assert [s["generation"] for s in r.json()["ranks"]] == [6, 6, 6]

    # a batch and an n-choice prompt are each one unit of work on one replica: every item answered, in
    # order, with the tokens the same prompt gets alone
    alone = client.post("/generate", json={"text": "hi there", "max_new_tokens": 3}).json()["output_ids"]
    r = client.post("/generate", json={"text": ["hello", "hi there", "hey"], "max_new_tokens": 3})
    assert r.status_code == 200, r.text
    batch = r.json()
    assert [len(b["output_ids"]) for b in batch] == [3, 3, 3] and batch[1]["output_ids"] == alone
    assert len({b["meta_info"]["dp_rank"] for b in batch}) == 1
    r = client.post("/v1/completions", json={"prompt": "hi there", "max_tokens": 3, "temperature": 0, "n": 2})
    assert r.status_code == 200, r.text
    assert [c["index"] for c in r.json()["choices"]] == [0, 1]


class FakeReplica:
    def __init__(self, index: int, inflight: int, alive: bool = True) -> None:
        self.index, self.inflight, self._alive = index, inflight, alive

    def alive(self) -> bool:
        return self._alive

    def healthy(self) -> bool:
        return self._alive


@pytest.mark.parametrize(
    ("method", "turns", "picked"),
    [
        ("round_robin", [0, 1, 2, 3], [0, 2, 3, 0]),  # replica 1 is down: skipped
        ("shortest_queue", [0, 1, 2, 3], [3, 3, 3, 3]),  # the least busy live one, every turn
    ],
)
def test_choose_routes_among_live_replicas(method: str, turns: list[int], picked: list[int]) -> None:
    """Routing skips exited replicas; round robin takes turns, shortest queue the fewest in flight."""
    from engine.dp.controller import choose

    replicas = [FakeReplica(0, 5), FakeReplica(1, 0, alive=False), FakeReplica(2, 3), FakeReplica(3, 1)]
    assert [choose(replicas, method, t).index for t in turns] == picked  # type: ignore[arg-type]


def test_choose_with_no_live_replica_says_how_to_recover() -> None:
    """With every replica down the request fails with the restart route named."""
    from engine.dp.controller import choose
    from engine.errors import ReplicaFailed

    with pytest.raises(
        ReplicaFailed, match=r"^no replica is alive -- restart them with POST /replicas/<index>/restart$"
    ):
        choose([FakeReplica(0, 0, alive=False)], "round_robin", 0)  # type: ignore[list-item]


class FakeProcess:
    exitcode = None

    def is_alive(self) -> bool:
        return True

    def join(self, timeout: float | None = None) -> None:
        pass


def test_answer_for_a_cancelled_request_does_not_stop_the_reader() -> None:
    """A caller that went away is skipped; the replica's next answers still reach their callers."""
    import multiprocessing

    from engine.dp.controller import Replica
    from engine.dp.messages import Ask, Chunk, Generate, Ready, Result
    from engine.request_params import SamplingParams

    ask = Ask("x", SamplingParams())

    ours, theirs = multiprocessing.Pipe()
    replica = Replica(0, FakeProcess(), ours)
    theirs.send(Ready(1, 4242))
    replica.wait_ready(5.0)
    gone = replica.submit(
        Generate(1, ask, stream=True), on_chunk=lambda chunk: pytest.fail("delivered to a gone caller")
    )
    waiting = replica.submit(Generate(2, ask))
    assert [theirs.recv() for _ in range(2)] == [Generate(1, ask, stream=True), Generate(2, ask)]
    assert gone.cancel()
    theirs.send(Chunk(1, "la", (7,)))
    theirs.send(Result(1, {"text": "late"}))
    theirs.send(Result(2, {"text": "ok"}))
    assert waiting.result(timeout=5) == {"text": "ok"}
    assert replica.inflight == 0
    theirs.close()


def _pids_alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        alive.append(pid)
    return alive


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serve_dp_stops_every_replica_on_signal(sig: int, tmp_path: Path) -> None:
    """`sgconf serve --dp-size 2` exits on SIGTERM or SIGINT and leaves no replica process behind."""
    with ServeProcess("--dp-size", "2", workdir=tmp_path) as server:
        health = server.wait_healthy()
        pids = [row["pid"] for row in health["replicas"]]
        assert len(pids) == 2 and _pids_alive(pids) == pids
        assert server.stop(sig, timeout_s=60) == 0
        assert _pids_alive(pids) == []
