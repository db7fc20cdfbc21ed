"""`sgconf serve`: load the config, start the engine, serve the HTTP control plane with uvicorn.

With no arguments it serves the embedded `tiny` model on 127.0.0.1:30000. The
hierarchical cache is on by default here (unless the radix cache is disabled or any
layer sets `enable_hierarchical_cache` explicitly): a server should accept a storage
attach without a restart, and the host tier costs a few MB for the tiny model. The
choice is recorded as the CLI-layer value, so `/server_info` shows where it came from.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

PROG = "sgconf serve"


def load_serve_record(argv: Sequence[str], env: Mapping[str, str] | None = None) -> Any:
    """The record `serve` runs with: flags, env and `--config`, plus the serve default for HiCache."""
    from sgconf.cli import config_parser, load_from_args
    from sgconf.flags import given_fields

    env = os.environ if env is None else env
    ns = config_parser(PROG, "run the embedded runtime and its HTTP control plane").parse_args(list(argv))
    loaded = load_from_args(ns, env)
    winner = loaded.winner("enable_hierarchical_cache")
    radix_off = loaded.winner("disable_radix_cache").value
    if winner.layer == "default" and not radix_off:
        from sgconf.loading import load_layers

        given = {**given_fields(ns), "enable_hierarchical_cache": True}
        loaded = load_layers(given, env=env, config_file=getattr(ns, "config", None))
    return loaded.record


def main(argv: Sequence[str] | None = None) -> int:
    """Run the server until interrupted; returns the exit status (2 for bad config, printed without a traceback)."""
    from engine.engine import Engine

    record = load_serve_record(list(sys.argv[1:] if argv is None else argv))
    from engine.dp.controller import serve_dp

    status = serve_dp(record)  # --dp-size N > 1: replicas behind a controller; None otherwise
    if status is not None:
        return status
    engine = Engine(record, configure_logs=True)
    try:
        return serve(engine)
    finally:
        engine.shutdown()


def serve(engine: Any) -> int:
    """Serve `engine` on the configured host and port with uvicorn; returns when the server stops."""
    import structlog
    import uvicorn

    from engine.http.app import create_app
    from runtime.accessors import get_serving

    serving = get_serving()
    log = structlog.get_logger(__name__)
    config = uvicorn.Config(
        create_app(engine), host=serving.host, port=serving.port, log_config=None, access_log=False, lifespan="off"
    )
    server = uvicorn.Server(config)
    log.info("server.listen", url=f"http://{serving.host}:{serving.port}")
    server.run()
    return 0 if server.started else 1
