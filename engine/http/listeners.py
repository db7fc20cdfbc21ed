"""The server's listening sockets, bound before anything is built, and the loop that serves them.

`bind_listeners` binds the public address (and the admin one, when `admin_host` and
`admin_port` are set) at start-up, before the engine or the replicas exist: a busy
port is one clear line naming it, not a socket error after minutes of building. The
bound sockets are handed to uvicorn as they are, so no other process can take the
port in between.

`serve_listeners` runs one uvicorn server per listener in one event loop and owns the
stop signals for all of them. On SIGTERM or SIGINT the server is marked stopping
(`engine.http.lifecycle`): the listeners stay open, `/health` answers 503 `stopping` so
load balancers move away, and every new request is refused with 503. Requests in flight
get `shutdown_grace_s` to finish; once none is left (or the grace ran out) every
listener closes, the backend fails what is left (503, "the server is shutting down") so
every caller gets an answer, and the loop returns. A second signal skips the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
import socket
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import attrs
import structlog

from engine.errors import PortUnavailable

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# after the grace period, what is aborted still needs a moment to send its 503
ABORT_ANSWER_S = 5.0
# how often a stopping server looks whether its last request was answered
DRAIN_POLL_S = 0.05

log = structlog.get_logger(__name__)


@attrs.frozen(slots=True)
class Listener:
    """One bound socket and which routes it serves (`public` and/or `admin`)."""

    name: str
    host: str
    port: int
    sock: socket.socket
    public: bool
    admin: bool

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def bind(name: str, host: str, port: int, *, flag: str) -> socket.socket:
    """A socket bound to (host, port); raises PortUnavailable with the address and the flag to change."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[
            0
        ]
    except socket.gaierror as exc:
        raise PortUnavailable(
            f"cannot listen on {host}:{port} ({name}): unknown host ({exc.strerror}) -- check --host"
        ) from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
    except OSError as exc:
        sock.close()
        why = exc.strerror or str(exc)
        msg = f"cannot listen on {host}:{port} ({name}): {why.lower()} -- stop what holds it or pick another {flag}"
        raise PortUnavailable(msg) from None
    sock.set_inheritable(False)
    return sock


def bind_listeners(serving: Any) -> list[Listener]:
    """Bind the listeners `serving` (a serving bag) asks for; raises PortUnavailable, binding nothing then."""
    public = bind("public routes", serving.host, serving.port, flag="--port")
    if serving.admin_host is None:
        return [Listener("public", serving.host, serving.port, public, public=True, admin=True)]
    try:
        admin = bind("admin routes", serving.admin_host, serving.admin_port, flag="--admin-port")
    except PortUnavailable:
        public.close()
        raise
    return [
        Listener("public", serving.host, serving.port, public, public=True, admin=False),
        Listener("admin", serving.admin_host, serving.admin_port, admin, public=False, admin=True),
    ]


def close_listeners(listeners: Sequence[Listener]) -> None:
    for listener in listeners:
        listener.sock.close()


class EarlyStop:
    """Records stop signals that arrive before the server runs (while the engine is built)."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._previous: dict[int, Any] = {}

    @contextlib.contextmanager
    def installed(self) -> Iterator[EarlyStop]:
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        self._previous = {sig: signal.signal(sig, self._record) for sig in STOP_SIGNALS}
        try:
            yield self
        finally:
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)
            self._previous = {}

    @property
    def active(self) -> bool:
        """Whether its handlers are installed (inside `installed()` on the main thread)."""
        return bool(self._previous)

    def _record(self, signum: int, frame: Any) -> None:
        self.received.append(signum)


def uvicorn_server(app: Any, grace_s: float) -> Any:
    """A uvicorn server for `app` that leaves the stop signals to us, with the connection settings of `serving`."""
    import uvicorn

    from engine.http.connections import uvicorn_options
    from runtime.serving import get_serving

    class _Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # the serving loop owns the stop signals of every listener; uvicorn would take
            # them per server and re-raise them at exit, killing the process before cleanup
            yield

    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=math.ceil(grace_s + ABORT_ANSWER_S),
        **uvicorn_options(get_serving()),
    )
    return _Server(config)


async def _serve(
    listeners: Sequence[Listener], apps: Sequence[Any], backend: Any, grace_s: float, early: EarlyStop
) -> tuple[bool, list[int]]:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals: list[int] = list(early.received)
    servers = [uvicorn_server(app, grace_s) for app in apps]

    def on_signal(signum: int) -> None:
        signals.append(signum)
        if stop.is_set():  # a second signal: no more waiting
            for server in servers:
                server.force_exit = True
        stop.set()

    in_main = threading.current_thread() is threading.main_thread()
    if in_main:
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, on_signal, sig)
    if signals:
        stop.set()
    try:
        tasks = [asyncio.create_task(s.serve(sockets=[li.sock])) for s, li in zip(servers, listeners, strict=True)]
        stopper = asyncio.create_task(stop.wait())
        # a stop signal, or one server ending on its own (it failed): either way all stop
        await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
        deadline = loop.time() + grace_s
        if signals:
            log.info("server.stopping", signals=[signal.Signals(s).name for s in signals], grace_s=grace_s)
            await _drain(apps, servers, deadline)
        for server in servers:
            server.should_exit = True
        abort = loop.call_later(max(0.0, deadline - loop.time()), lambda: loop.run_in_executor(None, _abort, backend))
        await asyncio.gather(*tasks, return_exceptions=True)
        abort.cancel()
        stopper.cancel()
    finally:
        if in_main:
            for sig in STOP_SIGNALS:
                loop.remove_signal_handler(sig)
                # the engine and the replicas are stopped after this returns: a late signal must
                # not kill the process half way through, so it is recorded like an early one
                if early.active:
                    signal.signal(sig, early._record)
    return all(s.started for s in servers) or bool(signals), signals


async def _drain(apps: Sequence[Any], servers: Sequence[Any], deadline: float) -> None:
    """Say stopping and refuse new requests, listening on, until none is in flight, the grace ends or a second signal."""
    loop = asyncio.get_running_loop()
    lifecycles = {
        id(life): life for life in (getattr(app.state, "lifecycle", None) for app in apps) if life is not None
    }
    for life in lifecycles.values():
        life.stop()
    while loop.time() < deadline and not any(s.force_exit for s in servers) and not all(s.should_exit for s in servers):
        if not any(life.inflight for life in lifecycles.values()):
            return
        await asyncio.sleep(DRAIN_POLL_S)


def _abort(backend: Any) -> None:
    count = backend.abort_inflight(
        "the server is shutting down and its grace period ran out -- retry on another server"
    )
    log.warning("server.grace_expired", aborted_requests=count)


def serve_listeners(
    listeners: Sequence[Listener], apps: Sequence[Any], backend: Any, *, grace_s: float, early: EarlyStop | None = None
) -> int:
    """Serve `apps[i]` on `listeners[i]` until a stop signal; 0 when it served (or was told to stop), 1 otherwise."""
    served, _ = asyncio.run(_serve(listeners, apps, backend, grace_s, early or EarlyStop()))
    return 0 if served else 1


__all__ = ["EarlyStop", "Listener", "bind", "bind_listeners", "close_listeners", "serve_listeners", "uvicorn_server"]
