"""A replica group across nodes: `--nnodes N --node-rank R --dist-init-addr host:port`.

`--dp-size` counts the replicas of the whole group; each node runs `dp_size / nnodes`
of them, node R the indices `R * per_node ... (R + 1) * per_node - 1`. Node 0 runs the
controller (`engine.dp.controller`): the HTTP app, the admin routes and the two-phase
override over every rank of every node. Another node runs `sgconf serve` with its own
`--node-rank`; it serves no HTTP, it only starts its replicas and waits for them
(`engine.dp.node_main`).

One config. The replicas of every node run node 0's launch record, which the controller
sends with its answer to each replica that joins; another node's own flags only say how
to find the group (`--nnodes`, `--node-rank`, `--dist-init-addr`, `--dist-timeout`,
`--dist-link-key`, and `--dp-size` for its share). So every rank starts at the same
fingerprint, and a node restarted without, say, the admin key still rejoins.

Meeting. The controller owns the torch.distributed rendezvous store at
`--dist-init-addr` (a `TCPStore`; every rank forms the gloo group through it) and
writes the address of its *node link* there: a TCP listener on the same host. Each
replica of another node reads that address, connects, and says which replica it is
(`Join`); from then on the link carries exactly the messages a local replica's pipe
does (`engine.dp.messages`), so routing, streaming, liveness and cancellation work the
same for every replica wherever it runs.

Joining late. The gloo group takes its members once. A replica that joins after the
group formed (its node restarted, or started late) is told so in the controller's
`Welcome`, which carries the config board's address: it joins the board without the
collective, and the controller replays every override committed so far
(`ConfigGroup.resync`) before it routes a request there. So a node that comes back
admits requests only at the group's generation. Until it is back, its replicas are down:
`/health` is 503 naming them and config changes are refused, all or nothing.
A node that is up but does not answer (stopped, cut off) makes each round wait out the
sync timeout and refuse, naming its ranks.

Trust. The link's messages are pickled, so a peer must be trusted before anything it
sends is read. With `--dist-link-key` (a secret given to every node) each connection
first passes multiprocessing's HMAC challenge both ways, on the connection's own
thread, and one that fails is closed unread. Without a key the link, like
torch.distributed itself, trusts its network: give `--dist-init-addr` an address on the
private network of the nodes.
"""

from __future__ import annotations

import datetime
import os
import pickle
import threading
from collections.abc import Callable
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection, Listener, answer_challenge, deliver_challenge
from typing import Any

import attrs
import structlog

from engine.dp.messages import Join, JoinRefusal, Refused, Welcome

log = structlog.get_logger("engine.dp.controller")

LINK_KEY = "sgconf/node_link"  # in the rendezvous store: "host:port" of the controller's node link
JOIN_TIMEOUT_S = 10.0  # how long a connection may take to say which replica it is
DEFAULT_START_TIMEOUT_S = 300.0  # without --dist-timeout: how long a group may take to form


@attrs.frozen(slots=True)
class NodeLayout:
    """Which replicas run on which node of a group of `nnodes` nodes and `dp_size` replicas."""

    dp_size: int
    nnodes: int = 1
    node_rank: int = 0

    @classmethod
    def of(cls, parallel: Any) -> NodeLayout:
        return cls(int(parallel.dp_size), int(parallel.nnodes), int(parallel.node_rank))

    @property
    def per_node(self) -> int:
        return self.dp_size // self.nnodes

    def node_of(self, index: int) -> int:
        return index // self.per_node

    def indices(self, node: int | None = None) -> range:
        """The replica indices of `node` (default: this one)."""
        node = self.node_rank if node is None else node
        return range(node * self.per_node, (node + 1) * self.per_node)


def split_addr(addr: str) -> tuple[str, int]:
    """`host:port` as a pair (the schema checked its form when it loaded)."""
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


def open_rendezvous(host: str, port: int, timeout_s: float) -> Any:
    """The rendezvous store every rank forms the gloo group through, owned by the controller (port 0: any free one)."""
    import torch.distributed as dist

    return dist.TCPStore(host, port, None, True, timeout=datetime.timedelta(seconds=timeout_s), wait_for_workers=False)


def join_rendezvous(host: str, port: int, timeout_s: float) -> Any:
    """A client of the controller's rendezvous store; waits up to `timeout_s` for the controller to be up."""
    import torch.distributed as dist

    return dist.TCPStore(host, port, None, False, timeout=datetime.timedelta(seconds=timeout_s))


class RemoteProcess:
    """The controller's view of a replica process on another node: alive while its link is open.

    It answers what `Replica` asks of a local process; stopping it closes the link, on
    which the replica leaves (it never outlives its controller).
    """

    exitcode = None  # another node's process: only its link is seen from here

    def __init__(self, node: int, conn: Connection) -> None:
        self.node = node
        self._conn = conn
        self.lost = threading.Event()  # set by the replica's reader when the link closed

    def is_alive(self) -> bool:
        return not self.lost.is_set()

    def join(self, timeout: float | None = None) -> None:
        self.lost.wait(timeout)

    def terminate(self) -> None:
        self._conn.close()
        self.lost.set()

    kill = terminate


class NodeLink:
    """The controller's listener for the replicas of other nodes; see the module docstring.

    Before the group forms, each replica's connection waits in `take`; after `formed`,
    a replica that joins is handed to `rejoin(index, conn)` on a thread of its own
    (the controller checks that the slot is free, replays the committed overrides and
    routes to it only then).
    """

    def __init__(self, host: str, layout: NodeLayout, *, key: str | None = None, record: Any = None) -> None:
        self.layout = layout
        self.record = record  # node 0's launch record: what every replica of the group runs
        self._key = None if key is None else key.encode()
        self._listener = Listener((host, 0), family="AF_INET")  # the handshake runs per connection, in _greet
        self.address: tuple[str, int] = (host, int(self._listener.address[1]))
        self._waiting: dict[int, Connection] = {}
        self._cond = threading.Condition()
        self._rejoin: Callable[[int, Connection], None] | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="dp-node-link", daemon=True)
        self._thread.start()

    def remote(self) -> list[int]:
        """The replica indices that run on other nodes."""
        return [i for i in range(self.layout.dp_size) if self.layout.node_of(i) != 0]

    def take(self, index: int, timeout_s: float) -> Connection:
        """The link of replica `index` at the first forming; ReplicaFailed when it did not connect in time."""
        from engine.errors import ReplicaFailed

        with self._cond:
            if not self._cond.wait_for(lambda: index in self._waiting or self._closed, timeout_s):
                node = self.layout.node_of(index)
                msg = (
                    f"replica {index} of node {node} did not join within {timeout_s:g}s -- start"
                    f" `sgconf serve --node-rank {node}` there with the same --dist-init-addr"
                )
                raise ReplicaFailed(msg)
            return self._waiting.pop(index)

    def formed(self, rejoin: Callable[[int, Connection], None]) -> None:
        """The group formed: a later join goes to `rejoin`, which answers it (`Welcome` with the board, or `Refused`)."""
        with self._cond:
            self._rejoin = rejoin
            late, self._waiting = self._waiting, {}
        for conn in late.values():  # connected after its slot was given up: it starts again from the board
            refuse(conn, JoinRefusal.FORMED, "the group formed without this replica -- restart its node to rejoin")

    def _accept(self) -> None:
        while True:
            try:
                conn = self._listener.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._greet, args=(conn,), name="dp-node-join", daemon=True).start()

    def _greet(self, conn: Connection) -> None:
        if self._key is not None:
            try:
                deliver_challenge(conn, self._key)  # the peer proves it holds the key ...
                answer_challenge(conn, self._key)  # ... and this side proves it to the peer
            except (AuthenticationError, EOFError, OSError):
                log.warning("dp.node_link_refused", reason="the peer did not prove it holds --dist-link-key")
                conn.close()
                return
        try:
            join = conn.recv() if conn.poll(JOIN_TIMEOUT_S) else None
        except Exception:  # unpickling what a stranger sent can raise anything: it is dropped with it
            join = None
        if not isinstance(join, Join):
            conn.close()
            return
        group = (self.layout.dp_size, self.layout.nnodes)
        if (join.dp_size, join.nnodes) != group:
            refuse(
                conn,
                JoinRefusal.LAYOUT,
                f"node {join.node} runs --dp-size {join.dp_size} --nnodes {join.nnodes}, this group --dp-size"
                f" {group[0]} --nnodes {group[1]} -- start every node with the same --dp-size and --nnodes",
            )
            return
        if join.index not in self.remote():
            refuse(conn, JoinRefusal.NOT_REMOTE, f"replica {join.index} does not run on another node of this group")
            return
        with self._cond:
            rejoin = self._rejoin
            if rejoin is None:
                if join.index in self._waiting:
                    refuse(conn, JoinRefusal.DUPLICATE, f"replica {join.index} joined already")
                    return
                send_quietly(conn, Welcome(None, self.record))
                self._waiting[join.index] = conn
                self._cond.notify_all()
                log.info("dp.node_replica_joined", replica=join.index, node=join.node, pid=join.pid)
                return
        rejoin(join.index, conn)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            waiting, self._waiting = self._waiting, {}
            self._cond.notify_all()
        self._listener.close()
        for conn in waiting.values():
            conn.close()


def send_quietly(conn: Connection, message: Any) -> None:
    """Send `message`; a link that closed meanwhile is left to whoever reads it."""
    try:
        conn.send(message)
    except OSError:
        pass


def refuse(conn: Connection, reason: JoinRefusal, message: str) -> None:
    """Answer a `Join` with `Refused(reason, message)` and close the link."""
    send_quietly(conn, Refused(reason, message))
    conn.close()


def connect_link(
    address: tuple[str, int], index: int, layout: NodeLayout, timeout_s: float, *, key: str | None = None
) -> tuple[Connection, Welcome]:
    """A replica's side of joining: connect to the controller's node link and wait for its answer.

    Raises JoinRefused (a ReplicaFailed) with the controller's typed reason and its words
    when it refuses this replica, ReplicaFailed when the two sides do not hold the same
    `key` (`--dist-link-key`).
    """
    from engine.errors import JoinRefused, ReplicaFailed

    where = f"{address[0]}:{address[1]}"
    try:
        conn = Client(address, family="AF_INET", authkey=None if key is None else key.encode())
    except (AuthenticationError, EOFError, ConnectionResetError) as exc:
        msg = (
            f"the controller at {where} and replica {index} do not hold the same --dist-link-key ({exc or 'refused'})"
            " -- give every node the same key, or none"
        )
        raise ReplicaFailed(msg) from None
    try:
        conn.send(Join(index, os.getpid(), layout.node_rank, layout.dp_size, layout.nnodes))
        answer = conn.recv() if conn.poll(timeout_s) else None
    except (EOFError, OSError, pickle.UnpicklingError):  # closed, or a challenge this side was not told to expect
        conn.close()
        msg = (
            f"the controller at {where} closed the link before it answered replica {index} -- if it was started"
            " with --dist-link-key, give this node the same key"
        )
        raise ReplicaFailed(msg) from None
    if isinstance(answer, Welcome):
        return conn, answer
    conn.close()
    refusal = answer if isinstance(answer, Refused) else None
    said = refusal.message if refusal is not None else f"no answer within {timeout_s:g}s"
    raise JoinRefused(
        f"the controller at {where} did not take replica {index}: {said}",
        reason=refusal.reason if refusal is not None else None,
    )


__all__ = [
    "DEFAULT_START_TIMEOUT_S",
    "JOIN_TIMEOUT_S",
    "LINK_KEY",
    "NodeLayout",
    "NodeLink",
    "RemoteProcess",
    "connect_link",
    "join_rendezvous",
    "open_rendezvous",
    "refuse",
    "send_quietly",
    "split_addr",
]
