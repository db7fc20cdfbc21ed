"""One data-parallel engine replica: its own engine and pools, a follower of the config group.

`replica_main` runs in a child process started by the data-parallel controller
(`engine.dp.controller`). It builds an `Engine` (role `scheduler`), joins the gloo
group and the config group, then serves requests that arrive on a pipe until the
controller says stop or the pipe closes (the controller died): a replica never
outlives its controller. SIGINT is ignored so a Ctrl-C in the terminal reaches the
controller, which then stops every replica in order.

Every message on the pipe is one of the classes of `engine.dp.messages`. While it
runs, a replica reports its progress to the controller every
`replica_heartbeat_interval_s` (`Heartbeat`): its finished scheduler steps, how many
requests it holds and runs, its KV and prefix-cache use and whether its storage tier
is degraded. A streamed request sends each piece as the engine fills it (`Chunk`). The controller marks a replica whose
reports stop (a stopped or hung process), or whose steps stop while it holds
requests, as unresponsive (`engine.dp.controller`).

`BoundaryEffect` is the replica's side of every propagated override: the engine loop is
parked between two steps (after a drain when a field declares `drain`) before the
replica votes, and a HiCache backend is opened on every replica before anyone commits
(`engine.storage_change.StorageChange`, as on one engine), made live on commit and
released on abort, so replicas end all
attached or all detached and no step runs across a round.
"""

from __future__ import annotations

import datetime
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import structlog

from engine.dp.messages import (
    Cancel,
    Chunk,
    Failed,
    FailureKind,
    FlushCache,
    Generate,
    GenerateUnit,
    Heartbeat,
    JoinRefusal,
    Ready,
    Result,
    Stop,
)
from sgconf.errors import SgconfError

log = structlog.get_logger(__name__)

# Requests one replica runs at once; concurrent ones are batched by the engine.
MAX_CONCURRENT = 64
# Seconds a stopping replica may spend cleaning up before it exits regardless.
CLEANUP_TIMEOUT_S = 30.0


class _Stopping(SgconfError):
    """SIGTERM reached a replica of another node: leave the serve loop as on `Stop`."""


def _stop_on_sigterm(signum: int, frame: Any) -> None:
    raise _Stopping


def _watch_lifeline(lifeline: Any) -> None:
    """Stop this replica (as on SIGTERM) once the process that started it has ended."""
    try:
        lifeline.recv()  # nothing is ever sent: this returns when the other end closes
    except (EOFError, OSError):
        pass
    os.kill(os.getpid(), signal.SIGTERM)


class BoundaryEffect:
    """Prepare every propagated override at a step boundary of this replica's engine, as its fields declare.

    Prepare parks the engine loop between two steps (after a drain for `drain` fields,
    bounded by `drain_timeout_s` and by half the vote timeout, so a slow drain is a
    refusal rather than a silent rank) and, for a storage change, opens the backend;
    the group commits the config while the loop is parked, then `commit` makes the
    storage change live and resumes the loop. `abort` releases both. So a round never
    lands inside a step, and a drain that cannot finish refuses the round on every rank.
    """

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def __call__(self, source: str, values: Mapping[str, Any]) -> Any:
        from runtime.serving import get_parallel, get_schedule

        self.engine.capacity.check(values, source)
        drain = self.engine.context.schema.apply_mode(values) == "drain"
        timeout = min(float(get_schedule().drain_timeout_s), float(get_parallel().config_sync_timeout_s) / 2)
        held = self.engine.hold_boundary(drain=drain, what=f"apply the override from {source!r}", timeout_s=timeout)
        try:
            storage = self._storage(values) if "hicache_storage_backend" in values else None
        except BaseException:
            held.close()
            raise
        return _Held(held, storage)

    def _storage(self, values: Mapping[str, Any]) -> Any:
        from engine.storage_change import StorageChange

        hicache = self.engine.hicache
        return StorageChange.prepare(None if hicache is None else hicache.controller, values)


class _Held:
    """A prepared round: the parked loop, and the storage change that goes with it (if any)."""

    def __init__(self, held: Any, storage: Any) -> None:
        self.held = held
        self.storage = storage

    def commit(self) -> None:
        self._end("commit")

    def abort(self) -> None:
        self._end("abort")

    def _end(self, verb: str) -> None:
        """Commit or abort the storage change; the loop is let go either way, even when that fails."""
        try:
            if self.storage is not None:
                getattr(self.storage, verb)()
        finally:
            self.held.close()


def replica_main(
    rank: int,
    world_size: int,
    rendezvous: tuple[str, int] | None,
    record: Any,
    conn: Any,
    workdir: str | None,
    address: tuple[str, int] | None = None,
    *,
    link: tuple[str, int] | None = None,
    layout: Any = None,
    lifeline: Any = None,
) -> None:
    """Child-process entry point: build the engine, join the groups, serve the pipe, shut down cleanly.

    The gloo group forms through the controller's `rendezvous` store. A replica started
    in place of one that exited gets the config group's board `address` instead: the
    gloo group cannot take a new member, and the config group needs it only to learn
    that address. A replica of another node gets no pipe but the controller's node
    `link` and its node's `layout` (`engine.dp.nodes`): it joins there first, and the
    controller's answer says whether the group is forming or it rejoins the board, and
    carries node 0's record, which the replica runs. Such a replica leaves cleanly
    on SIGTERM (its node's `sgconf serve` forwards a stop signal), and when its node's
    process ends (its `lifeline` pipe closes), so a killed node leaves no replica behind.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if workdir is not None:
        os.chdir(workdir)
    from runtime.logs import configure_from_record, tag_process

    tag_process(dp_rank=rank - 1)  # config-group rank 0 is the controller; replica i is rank i + 1
    configure_from_record(record)
    import torch.distributed as dist

    from engine.dp.nodes import DEFAULT_START_TIMEOUT_S
    from engine.engine import Engine, freeze_start_up_heap
    from engine.model import run_sizes
    from runtime.distributed import ConfigGroup
    from sgconf.record import to_bags

    parallel = to_bags(record)["parallel"]  # this node's own: how to find the group, how long it may take
    forming_s = float(parallel.dist_timeout or DEFAULT_START_TIMEOUT_S)
    if link is not None:
        from engine.dp.nodes import connect_link
        from engine.errors import ReplicaFailed

        try:
            conn, welcome = connect_link(link, rank - 1, layout, forming_s, key=parallel.dist_link_key)
        except (ReplicaFailed, OSError) as exc:
            sys.exit(join_failed(exc))
        address = welcome.board
        if welcome.record is not None:  # the group runs node 0's config, whatever this node was started with
            if rank - 1 == layout.indices()[0]:  # said once per node
                _say_differences(record, welcome.record, layout.node_rank)
            record = welcome.record
            configure_from_record(record)
    engine = Engine(record, configure_logs=True)
    if address is None:
        from engine.dp.nodes import join_rendezvous

        assert rendezvous is not None, "a replica joins through the rendezvous store or the board"
        try:
            store = join_rendezvous(*rendezvous, timeout_s=forming_s)
            dist.init_process_group(
                "gloo", store=store, rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=forming_s)
            )
        except RuntimeError:  # torch's store timeout: the controller reports which part of the group is missing
            log.error("replica.group_not_formed", within_s=forming_s)
            engine.shutdown()
            sys.exit(1)
    group = ConfigGroup(None, rank, world_size, address=address)
    group.add_effect(BoundaryEffect(engine))
    group.start()
    freeze_start_up_heap()  # built for good: no full collection walks it under load
    sender = _Sender(conn)
    sender.send(Ready(rank, os.getpid(), run_sizes(engine.shape)[2]))
    log.info("replica.ready", pid=os.getpid())
    stopped = threading.Event()
    beat = threading.Thread(
        target=_heartbeat, args=(engine, sender, stopped), name=f"replica{rank}-heartbeat", daemon=True
    )
    beat.start()
    pool = ThreadPoolExecutor(MAX_CONCURRENT, thread_name_prefix=f"replica{rank}")
    running = Running()
    if link is not None:
        signal.signal(signal.SIGTERM, _stop_on_sigterm)
    if lifeline is not None:
        threading.Thread(target=_watch_lifeline, args=(lifeline,), name="replica-lifeline", daemon=True).start()
    try:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                log.warning("replica.controller_gone")
                break
            if isinstance(message, Stop):
                break
            if isinstance(message, Generate):
                pool.submit(_generate, engine, rank, message, sender, running)
            elif isinstance(message, GenerateUnit):
                pool.submit(_generate_unit, engine, rank, message, sender, running)
            elif isinstance(message, Cancel):
                _cancel(engine, message.rid, running)
            elif isinstance(message, FlushCache):
                pool.submit(_flush_cache, engine, rank, message.rid, sender)
    except _Stopping:
        log.info("replica.stop_signal")
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second one during cleanup ends it at once
        # a replica must never outlive its controller: if cleanup hangs, leave anyway
        watchdog = threading.Timer(CLEANUP_TIMEOUT_S, os._exit, args=(3,))
        watchdog.daemon = True
        watchdog.start()
        stopped.set()
        group.close()
        engine.shutdown()
        pool.shutdown(wait=False, cancel_futures=True)
        if dist.is_initialized():
            dist.destroy_process_group()
        log.info("replica.stop")


def _say_differences(own: Any, group: Any, node: int) -> None:
    """Log which counted settings this node was started with differently from node 0 (names only: secrets stay unsaid)."""
    from runtime.fingerprint import counted
    from sgconf.record import record_to_dict
    from sgconf.schema import schema_of

    mine, theirs = record_to_dict(own), record_to_dict(group)
    differing = sorted(name for name in counted(schema_of(group)) if mine.get(name) != theirs.get(name))
    if differing:
        log.warning(
            "replica.config_differs",
            node=node,
            fields=differing,
            detail="this node was started with other values for these; it runs node 0's, as every node of a group does",
        )


class _Sender:
    """One pipe, many request threads: sends are serialized."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.lock = threading.Lock()

    def send(self, message: Any) -> None:
        with self.lock:
            try:
                self.conn.send(message)
            except (BrokenPipeError, OSError):
                pass  # the controller is gone; the main loop sees EOF and stops


def _heartbeat(engine: Any, sender: _Sender, stopped: threading.Event) -> None:
    """Report progress and load to the controller until `stopped` is set; see the module docstring."""
    from runtime.serving import get_parallel

    interval = float(get_parallel().replica_heartbeat_interval_s)
    seq = 0
    while True:
        queued, running = engine.busy_counts()
        storage = engine.storage_health()
        usage = engine.usage()
        sender.send(
            Heartbeat(
                seq,
                progress=engine.progress(),
                queued=queued,
                running=running,
                storage_degraded=bool(storage and storage.get("degraded")),
                token_usage=usage.get("token_usage"),
                cache_hit_rate=usage.get("cache_hit_rate"),
            )
        )
        seq += 1
        if stopped.wait(interval):
            return


def _flush_cache(engine: Any, rank: int, rid: int, sender: _Sender) -> None:
    from engine.errors import EngineBusy

    try:
        freed = engine.flush_cache()
    except EngineBusy as exc:
        sender.send(Failed.of(rid, exc))
        return
    sender.send(Result(rid, {"dp_rank": rank - 1, "flushed_tokens": freed}))


class Running:
    """The engine requests of this replica by the controller's request id (one, or a unit's), so a `Cancel` reaches them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reqs: dict[int, list[Any]] = {}
        self._cancelled: set[int] = set()  # cancelled before its request was queued

    def add(self, rid: int, req: list[Any]) -> bool:
        """Remember the requests `req` for `rid`; False when `rid` was cancelled already (the caller cancels them)."""
        with self._lock:
            if rid in self._cancelled:
                self._cancelled.discard(rid)
                return False
            self._reqs[rid] = req
            return True

    def done(self, rid: int) -> None:
        with self._lock:
            self._reqs.pop(rid, None)

    def take(self, rid: int) -> list[Any] | None:
        """The requests of `rid` to cancel now, or None (then they are cancelled when they are queued)."""
        with self._lock:
            req = self._reqs.pop(rid, None)
            if req is None:
                self._cancelled.add(rid)
            return req


def _cancel(engine: Any, rid: int, running: Running) -> None:
    reqs = running.take(rid)
    if reqs is not None:
        engine.cancel(reqs)


def _generate(engine: Any, rank: int, message: Generate, sender: _Sender, running: Running) -> None:
    """Run one request; a streamed one sends each piece as it fills."""
    from engine.http.bodies import generate_body

    rid, ask = message.rid, message.ask

    def work() -> dict[str, Any]:
        (req,) = engine.submit_batch(
            [(ask.prompt, ask.sampling)],
            stream=message.stream,
            timeout_s=ask.timeout_s,
            add_special_tokens=ask.add_special_tokens,
        )
        if not running.add(rid, [req]):
            engine.cancel([req])
        if message.stream:
            tokens = engine.token_stream(req)
            for chunk in tokens:
                sender.send(Chunk(rid, chunk.text, tuple(chunk.token_ids)))
            result = tokens.result()
        else:
            result = engine.wait(req)
        return generate_body(result, dp_rank=rank - 1)

    _answer(rid, rank, sender, running, work)


def join_failed(exc: BaseException) -> int:
    """Log why this replica could not join, worded by the controller's typed reason; returns the exit status.

    A server that is stopping refused it because nothing is left to join: said as
    information, exit 0. Any other refusal is an error naming the reason (`reason`
    field), exit 1, as is a link that failed before any answer (`replica.join_failed`).
    """
    reason = getattr(exc, "reason", None)
    if reason is None:
        log.error("replica.join_failed", error=str(exc))
        return 1
    if reason == JoinRefusal.STOPPING:
        log.info("replica.join_refused", reason=str(reason), error=str(exc))
        return 0
    log.error("replica.join_refused", reason=str(reason), error=str(exc))
    return 1


def _generate_unit(engine: Any, rank: int, message: GenerateUnit, sender: _Sender, running: Running) -> None:
    """Run a unit of work as one engine unit (`submit_batch`), answered once with every item's body, in order."""
    from engine.http.bodies import generate_body

    def work() -> dict[str, Any]:
        options = message.options
        reqs = engine.submit_batch(
            [(ask.prompt, ask.sampling) for ask in message.items],
            timeout_s=options.timeout_s,
            add_special_tokens=options.add_special_tokens,
        )
        if not running.add(message.rid, reqs):
            engine.cancel(reqs)
        return {"items": [generate_body(result, dp_rank=rank - 1) for result in engine.wait_all(reqs)]}

    _answer(message.rid, rank, sender, running, work)


def _answer(rid: int, rank: int, sender: _Sender, running: Running, work: Callable[[], dict[str, Any]]) -> None:
    """Send `work()`'s body as the answer to `rid`: a failure is answered too, never a hung caller; a request
    the controller cancelled gets no answer (nobody waits for one); `rid` leaves `running` either way."""
    from engine.errors import RequestCancelled

    try:
        body = work()
    except RequestCancelled:
        return
    except Exception as exc:
        sender.send(_failure(rid, rank, exc))
        return
    finally:
        running.done(rid)
    sender.send(Result(rid, body))


def _failure(rid: int, rank: int, exc: Exception) -> Failed:
    """The answer to a request that raised: its typed failure, or a replica failure for a bug (logged here)."""
    failed = Failed.of(rid, exc)
    if failed is None or failed.kind is FailureKind.REPLICA_FAILED:
        log.error("replica.generate_failed", error=repr(exc))
        failed = Failed(rid, FailureKind.REPLICA_FAILED, f"replica {rank - 1} failed the request -- see its log")
    return failed
