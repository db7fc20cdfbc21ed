"""`sgconf serve --dp-size N`: the controller of N engine replica processes.

The controller runs in the HTTP process with role `dp_controller` (it reads only the
namespaces of that role: model, parallel, serving, observability, disagg). It starts
N replica processes with torch.multiprocessing (spawn; each builds its own engine and
pools, see `engine.dp.replica`), and forms one gloo group with them: the controller is
rank 0 and coordinator of the config group, replica i is rank i + 1.

The HTTP app is the same one a single engine gets; the controller plugs in behind it
through `engine.dp.group_backend.ReplicaGroupBackend`.

- `/generate` goes to one replica, round robin or to the shortest queue
  (`load_balance_method`, a hot field read per request).
- Attach/detach and `/config/overrides` are propagated through the config group: every
  replica validates and prepares, then all commit or none does. A failure on one replica
  is a 400 naming each refusing rank and its reason; nothing changed anywhere then.
- `/server_info` shows the controller's resolved config and, for every rank, its
  generation and fingerprint, plus the last fingerprint mismatch if any.
- `/health` is 503 as soon as a replica process has exited, and config changes are
  refused (503) until it is back: every rank must take part in a round.
  `POST /replicas/<index>/restart` (admin) starts a new process in its place, which
  catches up with every override the group committed so far (`ConfigGroup.resync`)
  before it takes requests, so it rejoins at the others' generation and fingerprint.
  `POST /replicas/<index>/resync` (admin) brings a running replica that fell behind
  (its commit failed, or it refuses rounds as diverged) up to date the same way.
- Liveness: every replica reports its progress over its pipe (`engine.dp.replica`).
  A replica with no report for `replica_stall_timeout_s`, or whose steps do not advance
  for that long while it holds requests, is *unresponsive*: `/health` turns 503 and
  names it, it gets no new requests, config changes are refused until it is back, and
  the requests it holds are retried on another replica (nothing was streamed to the
  client yet), or fail with 503 when none is left. A replica that exits (killed,
  crashed) has its requests retried the same way; a stream that already sent pieces
  ends with an error event instead.
- Every message on a replica's pipe is a class of `engine.dp.messages`; a streamed
  request comes back piece by piece (`Chunk`), as one engine streams. A report that shows progress again
  makes it responsive again. The check runs on a monitor thread every heartbeat
  interval (`check_liveness`, which tests call themselves with `monitor=False`).
- With `--nnodes N` the group spans nodes (`engine.dp.nodes`): this controller runs on
  node 0 with that node's replicas, and the replicas of every other node join it over
  its node link; they are routed to, streamed from, watched and configured exactly as
  local ones. A node that comes back rejoins by itself at the group's generation;
  `restart` applies to node 0's replicas only.
- Stopping (SIGTERM or SIGINT to the controller, or the server returning) stops every
  replica: a stop message, then terminate, then kill; a replica whose controller dies
  sees its pipe close and exits, so no replica is left behind.
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import structlog

from engine.dp.handle import Replica
from engine.dp.messages import FlushCache, JoinRefusal, Welcome
from engine.dp.nodes import (
    DEFAULT_START_TIMEOUT_S,
    JOIN_TIMEOUT_S,
    LINK_KEY,
    NodeLayout,
    NodeLink,
    RemoteProcess,
    open_rendezvous,
    refuse,
    send_quietly,
    split_addr,
)
from engine.dp.routing import RequestRouter, choose
from engine.errors import (
    NoSuchReplica,
    ReplicaElsewhere,
    ReplicaExited,
    ReplicaFailed,
    ReplicaRunning,
    ReplicaUnresponsive,
)
from engine.http.backend import EngineLoad

log = structlog.get_logger(__name__)

ROLE = "dp_controller"
STATUS_TIMEOUT_S = 2.0  # /server_info waits this long for a rank; a dead rank shows as not alive


class DPController:
    """Starts `dp_size` replicas of the published record and routes to them; see the module docstring.

    Publish the record with role `dp_controller` first; the controller reads the
    record (to hand it to the replicas) and its accessors, never the raw fields.
    `workdirs`, when given, maps a replica index to its working directory.
    """

    def __init__(
        self,
        *,
        workdirs: Callable[[int], str] | None = None,
        start_timeout_s: float | None = None,
        monitor: bool = True,
    ) -> None:
        import torch.distributed as dist
        import torch.multiprocessing as mp

        from engine.dp.replica import replica_main
        from runtime.context import get_server_args
        from runtime.distributed import ConfigGroup
        from runtime.serving import get_parallel

        parallel = get_parallel()
        if start_timeout_s is None:
            start_timeout_s = float(parallel.dist_timeout or DEFAULT_START_TIMEOUT_S)
        self.dp_size = int(parallel.dp_size)
        self.layout = NodeLayout.of(parallel)
        world_size = self.dp_size + 1
        addr = parallel.dist_init_addr
        host, port = split_addr(addr) if addr else ("127.0.0.1", 0)
        self._record = get_server_args()
        self._workdirs = workdirs
        self._start_timeout_s = start_timeout_s
        self._spawn_context = mp.get_context("spawn")
        self._entry = replica_main
        self.replicas: list[Replica] = []
        self._rids = itertools.count(1)
        self.router = RequestRouter(self.replicas, self._rids)
        self._restart_lock = threading.Lock()
        self._closed = False
        self.link: NodeLink | None = None
        try:
            # the rendezvous store lives here, so the other nodes find the node link through it
            self._store = open_rendezvous(host, port, start_timeout_s)
            self._rendezvous = (host, int(self._store.port))
            if self.layout.nnodes > 1:
                self.link = NodeLink(host, self.layout, key=parallel.dist_link_key, record=self._record)
                self._store.set(LINK_KEY, f"{self.link.address[0]}:{self.link.address[1]}")
            for index in self.layout.indices(0):
                self.replicas.append(self._spawn(index, rendezvous=self._rendezvous))
            if self.link is not None:
                log.info("dp.waiting_for_nodes", nodes=list(range(1, self.layout.nnodes)), rendezvous=f"{host}:{port}")
            try:
                dist.init_process_group(
                    "gloo",
                    store=self._store,
                    rank=0,
                    world_size=world_size,
                    timeout=datetime.timedelta(seconds=start_timeout_s),
                )
            except RuntimeError:  # torch's store timeout: some rank never came
                raise ReplicaFailed(self._not_formed(start_timeout_s)) from None
            self.group = ConfigGroup(None, 0, world_size, bind_host=host)
            if self.link is not None:
                for index in self.link.remote():
                    conn = self.link.take(index, start_timeout_s)
                    node = self.layout.node_of(index)
                    self.replicas.append(Replica(index, RemoteProcess(node, conn), conn, node=node))
                self.link.formed(self._rejoin)
            for replica in self.replicas:
                replica.wait_ready(start_timeout_s)
        except BaseException:
            self._stop_replicas()
            if self.link is not None:
                self.link.close()
            raise
        self._stop_monitor = threading.Event()
        self._monitor: threading.Thread | None = None
        if monitor:
            self._monitor = threading.Thread(target=self._watch, name="dp-liveness", daemon=True)
            self._monitor.start()
        log.info(
            "dp.start",
            dp_size=self.dp_size,
            nnodes=self.layout.nnodes,
            pids=[r.pid for r in self.replicas],
            rendezvous=f"{host}:{self._rendezvous[1]}",
        )

    def _not_formed(self, timeout_s: float) -> str:
        if self.layout.nnodes > 1:
            last = self.layout.nnodes - 1
            nodes = "node 1" if last == 1 else f"each of nodes 1 to {last}"
            return (
                f"the replica group did not form within {timeout_s:g}s: not every node joined -- start"
                f" `sgconf serve --node-rank N` on {nodes} with the same --dp-size, --nnodes and --dist-init-addr"
            )
        return f"the replicas did not all start within {timeout_s:g}s -- see their log lines ([DP<n>]) above"

    def _spawn(
        self, index: int, *, rendezvous: tuple[str, int] | None = None, address: tuple[str, int] | None = None
    ) -> Replica:
        ours, theirs = self._spawn_context.Pipe()
        workdir = self._workdirs(index) if self._workdirs is not None else None
        process = self._spawn_context.Process(
            target=self._entry,
            args=(index + 1, self.dp_size + 1, rendezvous, self._record, theirs, workdir, address),
            name=f"sgconf-replica{index}",
            daemon=True,
        )
        process.start()
        theirs.close()
        return Replica(index, process, ours)

    def _rejoin(self, index: int, conn: Any) -> None:
        """A replica of another node joined after the group formed: take its slot if free, catch it up, route to it.

        Runs on the node link's thread for that connection. The slot must hold a replica
        that is gone (its node stopped or restarted); the new one rejoins the config board,
        replays every committed override (`ConfigGroup.resync`) and only then gets requests.
        """
        node = self.layout.node_of(index)
        # a node restarted at once may join before its old link is seen to close: give that a moment
        self.replicas[index].process.join(JOIN_TIMEOUT_S)
        with self._restart_lock:
            old = self.replicas[index]
            if self._closed or old.alive():
                why = "the server is stopping" if self._closed else f"replica {index} is still connected"
                reason = JoinRefusal.STOPPING if self._closed else JoinRefusal.CONNECTED
                refuse(conn, reason, f"{why} -- a replica rejoins only in place of one whose link closed")
                return
            old.stop(5.0)
            self.group.clear_inbox(old.rank)  # what was sent to the gone rank must not reach the new one
            send_quietly(conn, Welcome(self.group.address, self._record))
            new = Replica(index, RemoteProcess(node, conn), conn, node=node)
            try:
                new.wait_ready(self._start_timeout_s)
                state = self.group.resync(new.rank)
            except Exception as exc:  # it stays down; the node may try again
                log.error("dp.replica_rejoin_failed", replica=index, node=node, error=str(exc))
                new.stop(30.0)
                return
            self.replicas[index] = new  # routed to only now, at the group's generation
        log.info("dp.replica_rejoined", replica=index, node=node, pid=new.pid, generation=state.generation)

    # -- routing -------------------------------------------------------------------------

    def pick(self) -> Replica:
        """The replica for the next request, by `load_balance_method`; raises ReplicaFailed when none is alive."""
        return self.router.pick()

    async def generate(self, args: dict[str, Any]) -> dict[str, Any]:
        """Route one request and await its answer (see `RequestRouter.generate`)."""
        return await self.router.generate(args)

    async def generate_many(self, argss: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Route a unit of work whole to one replica and await every item's answer (see `RequestRouter.generate_many`)."""
        return await self.router.generate_many(argss)

    def stream(self, args: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """Route one request as a stream (see `RequestRouter.stream`)."""
        return self.router.stream(args)

    # -- liveness ----------------------------------------------------------------------

    def check_liveness(self, now: float | None = None) -> list[int]:
        """Mark replicas unresponsive (or responsive again) from their reports; returns the ones whose state changed."""
        from runtime.serving import get_parallel

        timeout = float(get_parallel().replica_stall_timeout_s)
        changed = []
        for replica in self.replicas:
            if not replica.alive():
                continue
            stalled, why = replica.stalled_for(replica.clock() if now is None else now)
            if stalled > timeout and not replica.unresponsive:
                failed = replica.mark_unresponsive(why)
                log.error("dp.replica_unresponsive", replica=replica.index, reason=why, requests_moved=failed)
                changed.append(replica.index)
            elif stalled <= timeout and replica.unresponsive and replica.mark_responsive():
                log.info("dp.replica_responsive", replica=replica.index)
                changed.append(replica.index)
        return changed

    def _watch(self) -> None:
        from runtime.serving import get_parallel

        while True:
            try:
                interval = float(get_parallel().replica_heartbeat_interval_s)
                self.check_liveness()
            except Exception as exc:  # the config was unpublished at shutdown; one bad check must not end the watch
                log.debug("dp.liveness_check_failed", error=repr(exc))
                interval = 1.0
            if self._stop_monitor.wait(interval):
                return

    def abort_pending(self, reason: str) -> int:
        """Answer every request in flight on any replica with EngineStopped(`reason`); returns how many."""
        return sum(r.abort_pending(reason) for r in self.replicas)

    async def flush_cache(self) -> list[dict[str, Any]]:
        """Flush every replica's prefix cache; each refuses (EngineBusy) while it runs requests."""
        futures = [r.submit(FlushCache(next(self._rids))) for r in self.replicas]
        return list(await asyncio.gather(*(asyncio.wrap_future(f) for f in futures)))

    def loads(self) -> list[EngineLoad]:
        """Each live replica's last reported queue and pool use (requests it holds until its first report)."""
        out = []
        for replica in self.replicas:
            if not replica.alive():
                continue
            beat = replica.load
            node = replica.node if self.layout.nnodes > 1 else None
            if beat is None:
                out.append(EngineLoad(replica.index, 0, replica.inflight, node=node))
            else:
                out.append(
                    EngineLoad(
                        replica.index, beat.queued, beat.running, beat.token_usage, beat.cache_hit_rate, node=node
                    )
                )
        return out

    @property
    def vocab_size(self) -> int | None:
        """The served model's vocabulary, as the replicas reported it when they became ready (one record, one model)."""
        return next((r.vocab_size for r in self.replicas if r.vocab_size is not None), None)

    def busy(self) -> tuple[int, int]:
        """(replicas with requests in flight, requests in flight)."""
        counts = [r.inflight for r in self.replicas]
        return sum(1 for c in counts if c), sum(counts)

    # -- config ------------------------------------------------------------------------

    def propagate(self, source: str, **fields: Any) -> Any:
        """Apply an override on the controller and every replica, or on none (see ConfigGroup.propagate).

        Raises ReplicaFailed at once while a replica is down: it could not vote, so the
        round would only wait out the timeout to fail.
        """
        dead = [r for r in self.replicas if not r.alive()]
        if dead:
            which = ", ".join(f"{r.index} ({r.ended()})" for r in dead)
            remedies = []
            if any(r.node == 0 for r in dead):
                remedies.append("restart them with POST /replicas/<index>/restart")
            nodes = sorted({r.node for r in dead if r.node})
            if nodes:
                where = ", ".join(map(str, nodes))
                remedies.append(f"restart `sgconf serve --node-rank N` on node(s) {where} (they rejoin by themselves)")
            msg = (
                f"cannot change the config while replica(s) {which} are down: every replica must take part"
                f" -- {' and '.join(remedies)}, then retry"
            )
            raise ReplicaFailed(msg)
        stuck = [r.index for r in self.replicas if r.unresponsive]
        if stuck:
            msg = (
                f"cannot change the config while replica(s) {', '.join(map(str, stuck))} are not responding:"
                " every replica must take part -- retry once /health shows them responsive, or stop them and"
                " restart them with POST /replicas/<index>/restart"
            )
            raise ReplicaUnresponsive(msg)
        return self.group.propagate(source, **fields)

    def restart(self, index: int) -> dict[str, Any]:
        """Start a new process for an exited replica and bring it to the group's config; returns its row.

        The new replica joins the config group's board, replays every committed round
        (`ConfigGroup.resync`), and only then takes requests. Raises NoSuchReplica (no such
        replica), ReplicaRunning (it has not exited), ReplicaFailed (it did not start)
        or ResyncFailed (it could not catch up; it is stopped again).
        """
        if not 0 <= index < self.dp_size:
            raise NoSuchReplica(f"there is no replica {index} -- replicas are numbered 0 to {self.dp_size - 1}")
        node = self.layout.node_of(index)
        if node != 0:
            msg = (
                f"replica {index} runs on node {node}, which starts its own replicas -- restart"
                f" `sgconf serve --node-rank {node}` there; its replicas rejoin and catch up by themselves"
            )
            raise ReplicaElsewhere(msg)
        with self._restart_lock:
            old = self.replicas[index]
            if old.alive():
                msg = (
                    f"replica {index} is running (pid {old.pid}) -- only an exited replica can be restarted;"
                    f" bring a running one up to date with POST /replicas/{index}/resync"
                )
                raise ReplicaRunning(msg)
            old.stop(5.0)  # reaps the exited process and closes its pipe
            self.group.clear_inbox(old.rank)  # what was sent to the dead rank must not reach the new one
            new = self._spawn(index, address=self.group.address)
            try:
                new.wait_ready(self._start_timeout_s)
                state = self.group.resync(new.rank)
            except BaseException:
                new.stop(30.0)
                raise
            self.replicas[index] = new  # routed to only now, at the group's generation
        log.info("dp.replica_restarted", replica=index, pid=new.pid, generation=state.generation)
        return {**new.describe(), "generation": state.generation, "fingerprint": state.fingerprint}

    def resync(self, index: int) -> dict[str, Any]:
        """Bring a running replica to the group's generation and fingerprint (`ConfigGroup.resync`); returns its row.

        Raises NoSuchReplica (no such replica), ReplicaExited (restart it instead) or
        ResyncFailed (it could not catch up; it keeps running at its own generation).
        """
        if not 0 <= index < self.dp_size:
            raise NoSuchReplica(f"there is no replica {index} -- replicas are numbered 0 to {self.dp_size - 1}")
        with self._restart_lock:
            replica = self.replicas[index]
            if not replica.alive():
                node = self.layout.node_of(index)
                again = (
                    f"start a new one with POST /replicas/{index}/restart"
                    if node == 0
                    else f"restart `sgconf serve --node-rank {node}` on node {node}; it rejoins by itself"
                )
                msg = f"replica {index} exited ({replica.ended()}) -- {again}"
                raise ReplicaExited(msg)
            state = self.group.resync(replica.rank)
        log.info("dp.replica_resynced", replica=index, generation=state.generation)
        return {**replica.describe(), "generation": state.generation, "fingerprint": state.fingerprint}

    def ranks(self, *fields: str) -> list[dict[str, Any]]:
        """Every rank's generation and fingerprint (and the named fields), with its replica index."""
        return [self.rank_row(state) for state in self.group.ranks(*fields, timeout_s=STATUS_TIMEOUT_S)]

    def rank_row(self, state: Any) -> dict[str, Any]:
        """One rank's state as reports show it: with its role, and for a replica its index and node."""
        row: dict[str, Any] = state.to_dict()
        row["role"] = ROLE if state.rank == 0 else "scheduler"
        if state.rank:
            row["replica"] = state.rank - 1
        row["node"] = self.layout.node_of(state.rank - 1) if state.rank else 0
        return row

    def health(self) -> tuple[bool, list[dict[str, Any]]]:
        rows = [r.describe() for r in self.replicas]
        return all(row["alive"] and row["responsive"] for row in rows), rows

    # -- lifecycle -----------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop every replica, then leave the groups; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        monitor = getattr(self, "_monitor", None)
        if monitor is not None:
            self._stop_monitor.set()
            monitor.join(5.0)
        self._stop_replicas()
        if self.link is not None:
            self.link.close()
        import torch.distributed as dist

        group = getattr(self, "group", None)
        if group is not None:
            group.close()
        if dist.is_initialized():
            dist.destroy_process_group()
        log.info("dp.stop")

    def _stop_replicas(self) -> None:
        threads = [threading.Thread(target=r.stop, args=(30.0,)) for r in self.replicas]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


__all__ = ["DPController", "Replica", "choose"]
