"""A replica group across two "nodes": two `sgconf serve` process trees on loopback, two replicas each.

Node 0 serves HTTP and controls the group; node 1 only runs replicas 2 and 3, which
join node 0 over its node link. One group is reused for the whole story (starting
replicas is the slow part): routing to every node, an override on all five ranks, node
1 killed (health, refusals, routing to what is left), node 1 back (it rejoins at the
group's generation before it takes requests), node 1 stopped mid-round (the round
refuses on every rank), and node 0 stopping (node 1 leaves by itself).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import ServeProcess, free_port, wait_until

pytestmark = pytest.mark.slow  # starts processes: `make test-fast` leaves it out

LINK = {"SGCONF_DIST_LINK_KEY": "link-key"}  # the link admits only peers holding it
KEY = {"SGCONF_ADMIN_API_KEY": "admin-key", **LINK}
ADMIN = {"Authorization": "Bearer admin-key"}


def _node(rank: int, rendezvous: int, tmp: Path) -> ServeProcess:
    """Node 0 with the admin key and a 20 s round timeout; node 1 with neither and other limits: it runs node 0's config."""
    workdir = tmp / f"node{rank}"
    workdir.mkdir(exist_ok=True)
    group = ["--dp-size", "4", "--nnodes", "2", "--node-rank", str(rank), "--dist-init-addr", f"127.0.0.1:{rendezvous}"]
    if rank == 0:
        return ServeProcess(*group, "--config-sync-timeout-s", "20", env=KEY, workdir=workdir)
    return ServeProcess(*group, "--max-running-requests", "16", env=LINK, inherit_sgconf_env=False, workdir=workdir)


class Nodes:
    """Node 0 (`head`) and node 1 (`second`) of one group; `restart_second` starts node 1 again."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.rendezvous = tmp, free_port()
        self.head = _node(0, self.rendezvous, tmp)
        self.second = _node(1, self.rendezvous, tmp)
        self.started = [self.head, self.second]

    def restart_second(self) -> ServeProcess:
        self.second = _node(1, self.rendezvous, self.tmp)
        self.started.append(self.second)
        return self.second


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Nodes]:
    group = Nodes(tmp_path)
    try:
        yield group
    finally:
        for process in reversed(group.started):
            process.kill()


def _override(head: ServeProcess, **fields: Any) -> httpx.Response:
    return httpx.post(f"{head.base}/config/overrides", json=fields, headers=ADMIN, timeout=120)


def _ranks(head: ServeProcess, *fields: str) -> list[dict[str, Any]]:
    info = httpx.get(f"{head.base}/server_info", timeout=60).json()
    return list(info["ranks"])


def _generate(head: ServeProcess) -> dict[str, Any]:
    body = {"text": "hello", "sampling_params": {"max_new_tokens": 2}}
    r = httpx.post(f"{head.base}/generate", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return dict(r.json())


def _health(head: ServeProcess, status: str) -> dict[str, Any] | None:
    body = dict(httpx.get(f"{head.base}/health", timeout=30).json())
    return body if body["status"] == status else None


def _alive(head: ServeProcess) -> list[bool]:
    body = httpx.get(f"{head.base}/health", timeout=30).json()
    return [bool(r["alive"]) for r in body["replicas"]]


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_two_nodes_serve_configure_lose_and_regain_a_node(nodes: Nodes) -> None:
    head, second = nodes.head, nodes.second
    health = head.wait_healthy()
    assert [(r["replica"], r["node"]) for r in health["replicas"]] == [(0, 0), (1, 0), (2, 1), (3, 1)]

    # /metrics names each replica's node
    scrape = httpx.get(f"{head.base}/metrics", timeout=30).text
    for replica, node in ((0, 0), (1, 0), (2, 1), (3, 1)):
        assert f'sgconf:num_running_reqs{{node="{node}",replica="{replica}"}}' in scrape  # labels sorted

    # routed to every replica of every node, round robin
    assert {_generate(head)["meta_info"]["dp_rank"] for _ in range(4)} == {0, 1, 2, 3}

    # one override reaches all five ranks: same generation, same fingerprint, the new value everywhere
    r = _override(head, schedule_policy="lpm")
    assert r.status_code == 200, r.text
    assert [(row["rank"], row["node"]) for row in r.json()["ranks"]] == [(0, 0), (1, 0), (2, 0), (3, 1), (4, 1)]
    ranks = _ranks(head)
    assert [(row["node"], row["generation"]) for row in ranks] == [(0, 1), (0, 1), (0, 1), (1, 1), (1, 1)]
    # one config on every rank: node 0's (node 1 was started without the admin key and with its own limits)
    assert len({row["fingerprint"] for row in ranks}) == 1
    said = [line for line in second.stderr().splitlines() if "replica.config_differs" in line]
    assert len(said) == 1  # once for the node, naming the counted fields it was started with otherwise
    assert "fields=['config_sync_timeout_s', 'max_running_requests']" in said[0]
    assert "admin-key" not in second.stderr()

    # node 1 killed: its replicas follow it (their lifeline closed), the group says so and refuses changes
    replicas_of_second = [row["pid"] for row in health["replicas"] if row["node"] == 1]
    second.kill()
    wait_until("the controller to see node 1's replicas gone", lambda: _alive(head) == [True, True, False, False], 60)
    assert _health(head, "unhealthy") is not None
    wait_until("node 1's replicas to exit", lambda: not any(Path(f"/proc/{p}").exists() for p in replicas_of_second))
    r = _override(head, schedule_policy="fcfs")
    assert r.status_code == 503
    detail = r.json()["detail"]
    assert "replica(s) 2 (its link to node 1 closed), 3 (its link to node 1 closed) are down" in detail
    assert "restart `sgconf serve --node-rank N` on node(s) 1" in detail
    r = httpx.post(f"{head.base}/replicas/2/restart", headers=ADMIN, timeout=60)
    assert r.status_code == 409 and "runs on node 1" in r.json()["detail"]
    r = httpx.post(f"{head.base}/replicas/3/resync", headers=ADMIN, timeout=60)
    assert r.status_code == 409
    assert r.json()["detail"] == (
        "replica 3 exited (its link to node 1 closed) -- restart `sgconf serve --node-rank 1` on node 1;"
        " it rejoins by itself"
    )
    assert {_generate(head)["meta_info"]["dp_rank"] for _ in range(4)} == {0, 1}  # the rest keep serving

    # node 1 back: its new replicas rejoin, replay the committed override, and only then take requests
    second = nodes.restart_second()
    back = head.wait_healthy(timeout_s=300)
    assert [r["alive"] for r in back["replicas"]] == [True] * 4
    ranks = _ranks(head, "schedule_policy")
    assert [row["generation"] for row in ranks] == [1] * 5
    assert len({row["fingerprint"] for row in ranks}) == 1
    assert {_generate(head)["meta_info"]["dp_rank"] for _ in range(4)} == {0, 1, 2, 3}
    assert "dp.replica_rejoined" in head.stderr()

    # node 1 stopped (not dead): the round waits out the sync timeout and nothing changes anywhere
    assert _override(head, config_sync_timeout_s=5).status_code == 200
    stopped = _children(second.proc.pid)
    for pid in stopped:
        _signal(pid, signal.SIGSTOP)
    try:
        r = _override(head, schedule_policy="fcfs")
    finally:
        for pid in stopped:
            _signal(pid, signal.SIGCONT)
    assert r.status_code == 503, r.text
    assert r.json()["errors"] == ["rank 3: did not answer within 5s", "rank 4: did not answer within 5s"]
    ranks = _ranks(head)
    assert [row["generation"] for row in ranks[:3]] == [2, 2, 2]
    wait_until("node 1 to report again", lambda: _health(head, "ok"), 120)
    r = wait_until("node 1 to answer rounds again", lambda: _applied(_override(head, schedule_policy="fcfs")), 120)
    assert [row["generation"] for row in r["ranks"]] == [r["generation"]] * 5

    # node 0 stops: it stops node 1's replicas over their links, and node 1 leaves cleanly
    assert head.stop(signal.SIGTERM, timeout_s=120) == 0
    assert second.proc.wait(timeout=120) == 0
    assert "node.stop" in second.stderr()


def _applied(r: httpx.Response) -> dict[str, Any] | None:
    return dict(r.json()) if r.status_code == 200 else None


def _signal(pid: int, sig: int) -> None:
    import os

    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def test_a_node_that_never_joins_fails_the_start_in_one_line(tmp_path: Path) -> None:
    """Node 0 alone with --dist-timeout 5: exit 1 naming the missing node, no traceback, no replica left."""
    group = ["--dp-size", "4", "--nnodes", "2", "--node-rank", "0", "--dist-init-addr", f"127.0.0.1:{free_port()}"]
    with ServeProcess(*group, "--dist-timeout", "5", env=KEY, workdir=tmp_path) as head:
        assert head.proc.wait(timeout=240) == 1
        err = head.stderr()
    assert (
        "sgconf serve: the replica group did not form within 5s: not every node joined -- start"
        " `sgconf serve --node-rank N` on node 1 with the same --dp-size, --nnodes and --dist-init-addr"
    ) in err
    assert "Traceback" not in err
    assert err.count("replica.group_not_formed") == 2  # node 0's two replicas said why they left
    assert _children(head.proc.pid) == []
