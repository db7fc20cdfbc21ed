"""The controller's handle on one replica process: its pipe, the requests it holds, its liveness.

One reader thread per replica takes every message from the pipe (`engine.dp.messages`):
heartbeats update liveness and load, a streamed request's pieces go to its caller as
they come, and each answer settles its request's future. When the pipe closes (the
replica exited) every request it held fails with `ReplicaLost`, which the controller
retries elsewhere (`engine.dp.controller`). A replica of another node has a TCP link
instead of a pipe and a `RemoteProcess` instead of a process (`engine.dp.nodes`); the
handle treats both alike.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import structlog

from engine.dp import messages
from engine.dp.nodes import RemoteProcess
from engine.errors import EngineStopped, ReplicaFailed, ReplicaLost, ReplicaUnresponsive

log = structlog.get_logger("engine.dp.controller")


class _Call:
    """One request waiting on a replica: the future of its answer and, for a stream, where its pieces go."""

    __slots__ = ("future", "on_chunk")

    def __init__(self, on_chunk: Callable[[messages.Chunk], None] | None) -> None:
        self.future: Future[dict[str, Any]] = Future()
        self.on_chunk = on_chunk

    def fail(self, exc: BaseException) -> None:
        # a caller that went away (its await was cancelled) cancelled the future: nothing to tell
        if self.future.set_running_or_notify_cancel():
            self.future.set_exception(exc)


class Replica:
    """The controller's handle on one replica process: its pipe, in-flight requests and liveness."""

    def __init__(self, index: int, process: Any, conn: Any, *, node: int = 0) -> None:
        self.index = index
        self.rank = index + 1
        self.node = node
        self.process = process
        self.conn = conn
        self.pid: int | None = None
        self.vocab_size: int | None = None
        self.pending: dict[int, _Call] = {}
        self._lock = threading.Lock()
        self._reader: threading.Thread | None = None
        self.gone = False
        self.stopping = False
        self.clock = time.monotonic
        # liveness, from the replica's progress reports (stamped with the controller's clock)
        self.last_report: float = self.clock()
        self.progress = -1
        self.progress_at: float = self.last_report
        self.busy = 0
        self.storage_degraded = False
        self.unresponsive = False
        self.load: messages.Heartbeat | None = None  # the last report, for /metrics

    @property
    def inflight(self) -> int:
        return len(self.pending)

    def alive(self) -> bool:
        return not self.gone and self.process.is_alive()

    def healthy(self) -> bool:
        """Alive and reporting progress: the only replicas that get requests."""
        return self.alive() and not self.unresponsive

    def _report(self, beat: messages.Heartbeat) -> None:
        now = self.clock()
        with self._lock:
            self.last_report = now
            self.busy = beat.busy
            if beat.progress != self.progress or not self.busy:
                self.progress, self.progress_at = beat.progress, now
            self.storage_degraded = beat.storage_degraded
            self.load = beat

    def stalled_for(self, now: float) -> tuple[float, str]:
        """How long this replica has gone without making progress, and how that shows."""
        with self._lock:
            silent = now - self.last_report
            stuck = now - self.progress_at if self.busy or self.pending else 0.0
        if silent >= stuck:
            return silent, f"no progress report for {silent:.1f}s"
        return stuck, f"no finished step for {stuck:.1f}s with {max(self.busy, len(self.pending))} requests"

    def mark_unresponsive(self, why: str) -> int:
        """Stop routing here and fail what it holds with ReplicaUnresponsive (callers retry); returns how many."""
        with self._lock:
            if self.unresponsive:
                return 0
            self.unresponsive = True
            pending, self.pending = self.pending, {}
        msg = f"replica {self.index} stopped responding ({why}) -- the request was not served"
        for call in pending.values():
            call.fail(ReplicaUnresponsive(msg))
        return len(pending)

    def mark_responsive(self) -> bool:
        with self._lock:
            was, self.unresponsive = self.unresponsive, False
        return was

    def wait_ready(self, timeout_s: float) -> None:
        if not self.conn.poll(timeout_s):
            msg = f"replica {self.index} did not start within {timeout_s:g}s ({self.ended()})"
            raise ReplicaFailed(msg)
        try:
            message = self.conn.recv()
        except (EOFError, OSError):
            message = None
        if not isinstance(message, messages.Ready):
            self.process.join(5.0)
            msg = f"replica {self.index} exited while starting ({self.ended()}) -- see its log"
            raise ReplicaFailed(msg)
        self.pid = message.pid
        self.vocab_size = message.vocab_size
        self._reader = threading.Thread(target=self._read, name=f"dp-replica{self.index}-reader", daemon=True)
        self._reader.start()

    def submit(
        self,
        message: messages.Generate | messages.GenerateUnit | messages.FlushCache,
        *,
        on_chunk: Callable[[messages.Chunk], None] | None = None,
    ) -> Future[dict[str, Any]]:
        """Send one request and return the future of its answer; a stream's pieces go to `on_chunk` first."""
        call = _Call(on_chunk)
        with self._lock:
            if self.gone:
                raise ReplicaLost(self._exit_text())
            if self.unresponsive:
                raise ReplicaUnresponsive(f"replica {self.index} is not responding -- the request was not served")
            self.pending[message.rid] = call
            try:
                self.conn.send(message)
            except (BrokenPipeError, OSError):
                del self.pending[message.rid]
                raise ReplicaLost(self._exit_text()) from None
        return call.future

    def cancel(self, rid: int) -> None:
        """Tell the replica that request `rid`'s client went away, and stop waiting for its answer."""
        with self._lock:
            call = self.pending.pop(rid, None)
            if call is None or self.gone:
                return
            call.future.cancel()
            try:
                self.conn.send(messages.Cancel(rid))
            except (BrokenPipeError, OSError):
                pass  # the replica is gone: nothing runs there any more

    def _read(self) -> None:
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                break
            if isinstance(message, messages.Heartbeat):
                self._report(message)
                continue
            if isinstance(message, messages.Chunk):
                with self._lock:
                    call = self.pending.get(message.rid)
                if call is not None and call.on_chunk is not None and not call.future.cancelled():
                    call.on_chunk(message)
                continue
            if not isinstance(message, messages.Result | messages.Failed):
                log.error("dp.unknown_message", replica=self.index, message=type(message).__name__)
                continue
            with self._lock:
                call = self.pending.pop(message.rid, None)
            # a cancelled future is dropped here, or setting it would end the reader for every later request
            if call is None or not call.future.set_running_or_notify_cancel():
                continue
            if isinstance(message, messages.Result):
                call.future.set_result(message.body)
            else:
                call.future.set_exception(message.error())
        with self._lock:
            self.gone = True
            pending, self.pending = self.pending, {}
        if isinstance(self.process, RemoteProcess):
            self.process.lost.set()
        self.process.join(1.0)
        if self.stopping:
            log.info("dp.replica_stopped", replica=self.index, node=self.node, exitcode=self.process.exitcode)
        else:
            log.error(
                "dp.replica_exited",
                replica=self.index,
                node=self.node,
                exitcode=self.process.exitcode,
                failed_requests=len(pending),
            )
        for call in pending.values():
            call.fail(ReplicaLost(self._exit_text()))

    def abort_pending(self, reason: str) -> int:
        """Answer every request still waiting on this replica with EngineStopped(`reason`); returns how many."""
        with self._lock:
            pending, self.pending = self.pending, {}
        for call in pending.values():
            call.fail(EngineStopped(reason))
        return len(pending)

    def ended(self) -> str:
        """How the replica's process ended, as far as the controller can see."""
        if isinstance(self.process, RemoteProcess):
            return f"its link to node {self.node} closed"
        return f"exit code {self.process.exitcode}"

    def _exit_text(self) -> str:
        return f"replica {self.index} exited ({self.ended()}) -- the request was not served"

    def stop(self, timeout_s: float) -> None:
        """Ask the replica to stop; terminate, then kill it if it does not."""
        self.stopping = True
        try:
            self.conn.send(messages.Stop())
        except (BrokenPipeError, OSError):
            pass
        self.process.join(timeout_s)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(5.0)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5.0)
        self.conn.close()

    def describe(self) -> dict[str, Any]:
        return {
            "replica": self.index,
            "rank": self.rank,
            "node": self.node,
            "pid": self.pid,
            "alive": self.alive(),
            "exitcode": self.process.exitcode,
            "inflight": self.inflight,
            "responsive": not self.unresponsive,
            "progress": self.progress,
            "last_report_s_ago": round(self.clock() - self.last_report, 3),
            "storage_degraded": self.storage_degraded,
        }


__all__ = ["Replica"]
