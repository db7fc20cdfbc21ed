"""The parts of a multi-node replica group that need no second process: layout, the node link, the refusals."""

from __future__ import annotations

import threading
from multiprocessing import Pipe
from multiprocessing.connection import Client, Connection
from types import SimpleNamespace
from typing import Any

import pytest

from engine.dp.messages import Join, JoinRefusal, Refused, Welcome
from engine.dp.nodes import NodeLayout, NodeLink, RemoteProcess, connect_link, split_addr
from engine.errors import ReplicaFailed


def test_layout_splits_the_replicas_evenly_over_the_nodes() -> None:
    layout = NodeLayout(dp_size=6, nnodes=3, node_rank=1)
    assert layout.per_node == 2
    assert list(layout.indices()) == [2, 3]
    assert [list(layout.indices(n)) for n in range(3)] == [[0, 1], [2, 3], [4, 5]]
    assert [layout.node_of(i) for i in range(6)] == [0, 0, 1, 1, 2, 2]
    parallel = SimpleNamespace(dp_size=4, nnodes=2, node_rank=0)
    assert NodeLayout.of(parallel) == NodeLayout(4, 2, 0)


@pytest.mark.parametrize(
    ("addr", "pair"), [("10.0.0.1:5000", ("10.0.0.1", 5000)), ("[::1]:29500", ("::1", 29500)), ("h:1", ("h", 1))]
)
def test_split_addr(addr: str, pair: tuple[str, int]) -> None:
    assert split_addr(addr) == pair


@pytest.mark.parametrize(
    ("dp_size", "nnodes", "refused"), [(4, 2, False), (6, 3, False), (3, 2, True), (1, 2, True), (2, 4, True)]
)
def test_a_group_that_cannot_be_split_over_the_nodes_is_refused(dp_size: int, nnodes: int, refused: bool) -> None:
    from engine.machine import unhonoured

    snap = SimpleNamespace(
        parallel=SimpleNamespace(tp_size=1, pp_size=1, ep_size=1, dp_size=dp_size, nnodes=nnodes),
        device=SimpleNamespace(device="cpu"),
    )
    problems = unhonoured(snap, {"nnodes": "from --nnodes"})
    if not refused:
        assert problems == []
        return
    (problem,) = problems
    assert problem.path == "$.parallel.nnodes"
    assert problem.source == "from --nnodes"
    assert f"--dp-size {dp_size} cannot be split over --nnodes {nnodes}" in problem.message
    assert problem.message.endswith(f"-- give --dp-size a multiple of {nnodes} (the replicas of all nodes together)")


@pytest.fixture
def link() -> Any:
    node_link = NodeLink("127.0.0.1", NodeLayout(dp_size=4, nnodes=2))
    yield node_link
    node_link.close()


def _join(link: NodeLink, index: int) -> Connection:
    conn = Client(link.address, family="AF_INET")
    conn.send(Join(index, 1234, 1, 4, 2))
    return conn


def test_replicas_of_other_nodes_wait_for_the_group_to_form(link: NodeLink) -> None:
    assert link.remote() == [2, 3]
    conns = [_join(link, 2), _join(link, 3)]
    assert [c.recv() for c in conns] == [Welcome(None), Welcome(None)]  # forming: no board yet
    taken = [link.take(2, 30), link.take(3, 30)]
    taken[0].send("ping")
    assert conns[0].recv() == "ping"  # the controller's end of the same link
    for c in conns + taken:
        c.close()


def test_a_join_the_link_cannot_take_is_refused_with_its_reason(link: NodeLink) -> None:
    local = _join(link, 0)
    assert local.recv() == Refused(JoinRefusal.NOT_REMOTE, "replica 0 does not run on another node of this group")
    first, twice = _join(link, 2), None
    assert first.recv() == Welcome(None)
    twice = _join(link, 2)
    assert twice.recv() == Refused(JoinRefusal.DUPLICATE, "replica 2 joined already")
    garbage = Client(link.address, family="AF_INET")
    garbage.send("not a join")
    with pytest.raises(EOFError):
        garbage.recv()  # dropped without an answer
    noise = Client(link.address, family="AF_INET")
    noise.send_bytes(b"\x80\x05not a pickle at all")
    with pytest.raises(EOFError):
        noise.recv()  # dropped too, and the link still takes the next replica
    assert _join(link, 3).recv() == Welcome(None)
    for c in (local, first, twice, garbage, noise):
        c.close()


def test_a_node_started_with_another_layout_is_refused(link: NodeLink) -> None:
    with pytest.raises(ReplicaFailed) as info:
        connect_link(link.address, 3, NodeLayout(6, 2, 1), 30)
    assert str(info.value).endswith(
        "node 1 runs --dp-size 6 --nnodes 2, this group --dp-size 4 --nnodes 2"
        " -- start every node with the same --dp-size and --nnodes"
    )


def test_a_node_that_finds_no_controller_says_so_and_exits_1() -> None:
    from structlog.testing import capture_logs

    from engine.dp.node_main import serve_node
    from engine.serve import load_serve_record
    from tests.support import free_port

    port = free_port()
    argv = ["--dp-size", "4", "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", f"127.0.0.1:{port}"]
    with capture_logs() as logs:
        assert serve_node(load_serve_record(argv), start_timeout_s=0.3) == 1
    (event,) = [e for e in logs if e["event"] == "node.no_controller"]
    assert event["dist_init_addr"] == f"127.0.0.1:{port}" and event["node"] == 1
    assert event["error"] == (
        "no controller answered within 0.3s (WaitTimedOut) -- start node 0 (--node-rank 0)"
        " with the same --dist-init-addr, then this node"
    )


def test_a_replica_that_never_joins_is_named_with_the_command_that_starts_it(link: NodeLink) -> None:
    with pytest.raises(ReplicaFailed) as info:
        link.take(3, 0.05)
    assert str(info.value) == (
        "replica 3 of node 1 did not join within 0.05s -- start"
        " `sgconf serve --node-rank 1` there with the same --dist-init-addr"
    )


def test_after_forming_a_join_goes_to_the_rejoin_hook(link: NodeLink) -> None:
    seen: list[tuple[int, Connection]] = []
    arrived = threading.Event()

    def rejoin(index: int, conn: Connection) -> None:
        conn.send(Welcome(("127.0.0.1", 9)))
        seen.append((index, conn))
        arrived.set()

    early = _join(link, 3)
    assert early.recv() == Welcome(None)
    link.formed(rejoin)
    assert early.recv() == Refused(
        JoinRefusal.FORMED, "the group formed without this replica -- restart its node to rejoin"
    )
    conn, welcome = connect_link(link.address, 2, NodeLayout(4, 2, 1), 30)
    assert welcome == Welcome(("127.0.0.1", 9))
    assert arrived.wait(30) and seen[0][0] == 2
    conn.close()
    early.close()


def test_connect_link_raises_the_controllers_reason(link: NodeLink) -> None:
    with pytest.raises(ReplicaFailed) as info:
        connect_link(link.address, 1, NodeLayout(4, 2, 0), 30)
    assert getattr(info.value, "reason", None) is JoinRefusal.NOT_REMOTE  # typed: the replica decides from it
    assert str(info.value) == (
        f"the controller at 127.0.0.1:{link.address[1]} did not take replica 1:"
        " replica 1 does not run on another node of this group"
    )


def test_a_remote_process_is_alive_until_its_link_is_lost() -> None:
    ours, theirs = Pipe()
    process = RemoteProcess(1, ours)
    assert process.is_alive() and process.exitcode is None
    process.join(0.01)  # returns: the link is still open
    process.terminate()
    assert not process.is_alive() and ours.closed
    with pytest.raises(EOFError):
        theirs.recv()  # the replica sees its link close, and leaves


def test_fleet_membership_belongs_to_node_0(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.support import run_sgconf

    group = ["--dp-size", "4", "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "127.0.0.1:9"]
    code, out, err = run_sgconf(capsys, "serve", *group, "--fleet", "prod")
    assert (code, out) == (2, "")
    assert "$.fleet: --fleet is for node 0, which configures every node of its group" in err
    assert "-- leave it off --node-rank 1 (from --fleet)" in err


@pytest.fixture
def keyed_link() -> Any:
    node_link = NodeLink("127.0.0.1", NodeLayout(dp_size=4, nnodes=2), key="s3cret")
    yield node_link
    node_link.close()


def test_with_a_key_only_peers_holding_it_join(keyed_link: NodeLink) -> None:
    conn, welcome = connect_link(keyed_link.address, 2, NodeLayout(4, 2, 1), 30, key="s3cret")
    assert welcome == Welcome(None)
    assert keyed_link.take(2, 30) is not None
    conn.close()
    with pytest.raises(ReplicaFailed) as wrong:
        connect_link(keyed_link.address, 3, NodeLayout(4, 2, 1), 30, key="other")
    assert str(wrong.value).startswith(
        f"the controller at 127.0.0.1:{keyed_link.address[1]} and replica 3 do not hold the same --dist-link-key"
    )
    assert str(wrong.value).endswith("-- give every node the same key, or none")
    with pytest.raises(ReplicaFailed) as none:
        connect_link(keyed_link.address, 3, NodeLayout(4, 2, 1), 30)
    assert str(none.value) == (
        f"the controller at 127.0.0.1:{keyed_link.address[1]} closed the link before it answered replica 3"
        " -- if it was started with --dist-link-key, give this node the same key"
    )


UNPICKLED: list[str] = []  # what `_loaded` was called with: filled only if a link unpickles a stranger's bytes


def _loaded(what: str) -> None:
    UNPICKLED.append(what)


class _Tell:
    """Unpickling it calls `_loaded` in the process that unpickles it (this one: the link runs in-process)."""

    def __reduce__(self) -> Any:
        return (_loaded, ("a stranger's message",))


def _send_stranger(link: NodeLink) -> None:
    """A peer that sends a pickle first, where a keyed link expects the answer to its challenge."""
    import pickle

    stranger = Client(link.address, family="AF_INET")
    stranger.send_bytes(pickle.dumps(_Tell()))
    with pytest.raises(EOFError):
        while True:  # whatever comes back (a challenge, a refusal), then the closed link
            stranger.recv_bytes()
    stranger.close()


def test_with_a_key_nothing_a_stranger_sends_is_unpickled(keyed_link: NodeLink, link: NodeLink) -> None:
    UNPICKLED.clear()
    _send_stranger(keyed_link)
    assert UNPICKLED == []
    _send_stranger(link)  # without a key the same bytes are loaded: the probe itself works
    assert UNPICKLED == ["a stranger's message"]


@pytest.mark.parametrize(
    ("reason", "status", "level"),
    [(JoinRefusal.STOPPING, 0, "info"), (JoinRefusal.LAYOUT, 1, "error"), (None, 1, "error")],
)
def test_a_refused_replica_words_its_exit_by_the_reason(reason: JoinRefusal | None, status: int, level: str) -> None:
    """A stopping server is no failure (exit 0, information); any other refusal is an error naming its reason."""
    from structlog.testing import capture_logs

    from engine.dp.replica import join_failed
    from engine.errors import JoinRefused

    with capture_logs() as logs:
        assert join_failed(JoinRefused("the controller did not take replica 3: ...", reason=reason)) == status
    (event,) = logs
    assert event["log_level"] == level
    if reason is None:
        assert event["event"] == "replica.join_failed" and "reason" not in event
    else:
        assert (event["event"], event["reason"]) == ("replica.join_refused", str(reason))
