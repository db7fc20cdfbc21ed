"""`sgconf serve`: load the config, start the engine (or its replicas), serve the HTTP app with uvicorn.

With no arguments it serves the embedded `tiny` model on 127.0.0.1:30000. The
hierarchical cache is on by default here (unless the radix cache is disabled or any
layer sets `enable_hierarchical_cache` explicitly): a server should accept a storage
attach without a restart, and the host tier costs a few MB for the tiny model. The
choice is recorded as the CLI-layer value, so `/server_info` shows where it came from.

With `--dp-size N` (N > 1) this process becomes the controller of N replica processes
(role `dp_controller`); the HTTP app is the same either way, only its backend differs.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import structlog

from runtime.accessors import get_serving
from runtime.context import publish, reset
from sgconf.cli import config_parser, load_from_args
from sgconf.flags import given_fields
from sgconf.loading import load_layers
from sgconf.record import to_bags

PROG = "sgconf serve"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

log = structlog.get_logger(__name__)


def load_serve_record(argv: Sequence[str], env: Mapping[str, str] | None = None) -> Any:
    """The record `serve` runs with: flags, env and `--config`, plus the serve default for HiCache."""
    env = os.environ if env is None else env
    ns = config_parser(PROG, "run the embedded runtime and its HTTP control plane").parse_args(list(argv))
    loaded = load_from_args(ns, env)
    winner = loaded.winner("enable_hierarchical_cache")
    radix_off = loaded.winner("disable_radix_cache").value
    if winner.layer == "default" and not radix_off:
        given = {**given_fields(ns), "enable_hierarchical_cache": True}
        loaded = load_layers(given, env=env, config_file=getattr(ns, "config", None))
    return loaded.record


def main(argv: Sequence[str] | None = None) -> int:
    """Run the embedded runtime and its HTTP control plane until interrupted; returns the exit status.

    Bad config gives 2, printed without a traceback. Registered as the `serve` command of
    the `sgconf` CLI (entry-point group `sgconf.commands`).
    """
    record = load_serve_record(list(sys.argv[1:] if argv is None else argv))
    status = serve_dp(record)  # --dp-size N > 1: replicas behind a controller; None otherwise
    if status is not None:
        return status
    from engine.engine import Engine

    engine = Engine(record, configure_logs=True)
    try:
        return serve(engine)
    finally:
        engine.shutdown()


def serve(engine: Any) -> int:
    """Serve one `engine` on the configured host and port; returns when the server stops."""
    from engine.http.engine_backend import EngineBackend

    return run_app(EngineBackend(engine))


def serve_dp(record: Any) -> int | None:
    """Serve `record` with data-parallel replicas when its dp_size is above 1; None (nothing done) otherwise.

    Publishes the record with role `dp_controller`, starts the replicas, runs uvicorn
    until SIGTERM/SIGINT, then stops every replica. Returns the exit status.
    """
    if to_bags(record)["parallel"].dp_size <= 1:  # the launch value; nothing is published yet
        return None
    from engine.dp.controller import ROLE, DPController
    from engine.dp.group_backend import ReplicaGroupBackend
    from runtime.logs import configure_from_config

    publish(record, role=ROLE)
    configure_from_config()
    controller = DPController()
    try:
        return run_app(ReplicaGroupBackend(controller), dp_size=controller.dp_size)
    finally:
        controller.shutdown()
        reset()


def run_app(backend: Any, **listen_fields: Any) -> int:
    """Run uvicorn on the one HTTP app around `backend` until SIGTERM/SIGINT; 0 when it served, 1 otherwise."""
    import uvicorn

    from engine.http.app import create_app

    serving = get_serving()
    config = uvicorn.Config(
        create_app(backend), host=serving.host, port=serving.port, log_config=None, access_log=False, lifespan="off"
    )
    server = uvicorn.Server(config)
    log.info("server.listen", url=f"http://{serving.host}:{serving.port}", pid=os.getpid(), **listen_fields)
    # uvicorn re-raises the stop signal once it has shut down, which would kill this process
    # before the engine or the replicas are stopped; these handlers take that second delivery
    received: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: received.append(signum)) for sig in STOP_SIGNALS}
    try:
        server.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if received:
        log.info("server.stopping", signals=[signal.Signals(s).name for s in received])
    return 0 if server.started else 1
