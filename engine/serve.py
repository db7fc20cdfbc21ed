"""`sgconf serve`: load the config, start the engine (or its replicas), serve the HTTP app with uvicorn.

With no arguments it serves the embedded `tiny` model on 127.0.0.1:30000. The
hierarchical cache is on by default here (unless the radix cache is disabled or any
layer sets `enable_hierarchical_cache` explicitly): a server should accept a storage
attach without a restart, and the host tier costs a few MB for the tiny model. The
choice is recorded in the CLI layer as "sgconf serve's default", so `/server_info`
shows where it came from, and `serve --help` states it.

Logs go to stderr from the first line; the listen URL is printed once whatever the
level, and each engine logs a one-line start-up summary (`engine.start`).

With `--dp-size N` (N > 1) this process becomes the controller of N replica processes
(role `dp_controller`); the HTTP app is the same either way, only its backend differs.
With `--nnodes M` the N replicas are spread over M nodes: node 0 serves HTTP and
controls the group, every other node (`--node-rank R`) only runs its share of the
replicas, which join node 0 (`engine.dp.nodes`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import structlog

from engine.errors import PortUnavailable, ReplicaFailed
from engine.http.listeners import bind_listeners, close_listeners
from engine.machine import refuse_unhonoured
from runtime.context import publish, reset
from runtime.logs import announce, configure_from_record
from runtime.serving import get_serving
from sgconf.cli import config_parser, load_from_args
from sgconf.errors import ConfigError, Problem
from sgconf.flags import given_fields, typed_flags
from sgconf.loading import load_layers, provenance_of
from sgconf.record import to_bags
from sgconf.resolution import resolve_once
from sgconf.serving import SERVING

PROG = "sgconf serve"
# secrets given as flags are visible to every local user in the process list
SECRET_FLAGS_WARNED = ("admin_api_key", "api_key", "dist_link_key")

log = structlog.get_logger(__name__)


# Flags other runtimes take for a model hub; there is none here, so each gets one line saying so.
HUB_FLAGS = ("--revision", "--tokenizer-revision", "--code-revision", "--download-dir", "--hf-token")

# What `serve` applies instead of the declared default, as its --help and provenance say it.
HICACHE_DEFAULT = "sgconf serve's default (on unless --disable-radix-cache)"
SHOWN_DEFAULTS = {"enable_hierarchical_cache": "true for sgconf serve, unless --disable-radix-cache"}


def serve_parser() -> Any:
    """The `serve` parser: every setting's flag and aliases, with serve's own defaults in its help."""
    from engine.fleet.flags import add_fleet_flags

    parser = config_parser(
        PROG, "run the embedded runtime and its HTTP control plane", schema=SERVING, shown_defaults=SHOWN_DEFAULTS
    )
    add_fleet_flags(parser)  # --fleet NAME --fleet-store etcd://host:port: follow a fleet's desired config
    return parser


def load_serve_record(argv: Sequence[str], env: Mapping[str, str] | None = None) -> Any:
    """The record `serve` runs with: flags, env and `--config`, plus the serve default for HiCache."""
    return load_serve(argv, env).record


def load_serve(argv: Sequence[str], env: Mapping[str, str] | None = None) -> Any:
    """What `serve` loads (the record and every layer's winner), with the serve default for HiCache."""
    env = os.environ if env is None else env
    refuse_hub_flags(argv)
    ns = serve_parser().parse_args(list(argv))
    loaded = load_from_args(ns, env, schema=SERVING)
    winner = loaded.winner("enable_hierarchical_cache")
    radix_off = loaded.winner("disable_radix_cache").value
    if winner.layer == "default" and not radix_off:
        given = {**given_fields(ns, SERVING), "enable_hierarchical_cache": True}
        typed = {**typed_flags(ns), "enable_hierarchical_cache": HICACHE_DEFAULT}
        loaded = load_layers(given, env=env, config_file=getattr(ns, "config", None), schema=SERVING, typed=typed)
    return loaded


def warn_secrets_on_command_line(loaded: Any) -> None:
    """Warn about each secret given as a flag; called once logs go to stderr, so stdout stays clean."""
    for name in SECRET_FLAGS_WARNED:
        winner = loaded.winner(name)
        if winner.layer == "cli":
            log.warning(
                "serve.secret_on_command_line",
                field=name,
                detail=f"the key given with --{name.replace('_', '-')} is visible to every local user in the process list"
                f" -- use env SGCONF_{name.upper()}" + (" or --admin-api-key-file" if name == "admin_api_key" else ""),
            )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the embedded runtime and its HTTP control plane until interrupted; returns the exit status.

    Bad config gives 2, printed without a traceback; a port that cannot be bound gives 1
    with one line naming it, before anything is built. SIGTERM or SIGINT at any point
    (even while the engine is built) stops the server cleanly with 0: listeners close,
    requests in flight get `shutdown_grace_s`, the engine flushes pending HiCache
    write-back. Registered as the `serve` command of the `sgconf` CLI (entry-point group
    `sgconf.commands`).
    """
    from engine.http.listeners import EarlyStop

    with EarlyStop().installed() as early:
        args = list(sys.argv[1:] if argv is None else argv)
        loaded = load_serve(args)
        record = loaded.record
        launch = {name: chain[-1].describe() for name, chain in (provenance_of(record) or {}).items()}
        refuse_unhonoured(SimpleNamespace(**resolve_once(record).bags()), launch)  # before a port is bound
        serving = to_bags(record)["serving"]  # the launch values; nothing is published yet
        from engine.fleet.flags import fleet_options

        fleet = fleet_options(serve_parser().parse_args(args), serving)
        node_rank = to_bags(record)["parallel"].node_rank
        if node_rank > 0 and fleet is not None:
            msg = f"--fleet is for node 0, which configures every node of its group -- leave it off --node-rank {node_rank}"
            raise ConfigError([Problem("$.fleet", msg, "from --fleet")])
        configure_from_record(record)  # before anything logs, so every line goes to stderr in the chosen format
        warn_secrets_on_command_line(loaded)
        check_admin_key_file(serving)
        if node_rank > 0:  # another node of a multi-node group: no HTTP here
            from engine.dp.node_main import serve_node

            return serve_node(record, early)
        try:
            listeners = bind_listeners(serving)
        except PortUnavailable as exc:
            print(f"{PROG}: {exc}", file=sys.stderr)
            return 1
        try:
            try:  # --dp-size N > 1: replicas behind a controller
                status = serve_dp(record, listeners, early, fleet=fleet)
            except ReplicaFailed as exc:  # the group could not start: said in one line, no traceback
                print(f"{PROG}: {exc}", file=sys.stderr)
                return 1
            if status is not None:
                return status
            from engine.engine import Engine

            engine = Engine(record, configure_logs=True)
            try:
                return serve(engine, listeners, early, fleet=fleet)
            finally:
                engine.shutdown()  # flushes pending HiCache write-back
        finally:
            close_listeners(listeners)


def refuse_hub_flags(argv: Sequence[str]) -> None:
    """A ConfigError for flags that fetch from a model hub: nothing is downloaded here."""
    given = [a.split("=", 1)[0] for a in argv if a.split("=", 1)[0] in HUB_FLAGS]
    if given:
        problems = [
            Problem(
                f"$.{g[2:].replace('-', '_')}",
                f"{g} selects what to download from a model hub, and this server downloads nothing "
                "-- download the checkpoint first and pass its directory with --model-path",
            )
            for g in dict.fromkeys(given)
        ]
        raise ConfigError(problems, header="invalid command line")


def check_admin_key_file(serving: Any) -> None:
    """Refuse to start when admin_api_key_file is set but unreadable or empty (a ConfigError naming it)."""
    if serving.admin_api_key_file is None:
        return
    from engine.http.auth import KEY_FILE, KeyFileError

    try:
        KEY_FILE.read(serving.admin_api_key_file)
    except KeyFileError as exc:
        raise ConfigError([Problem("$.serving.admin_api_key_file", str(exc))]) from None


def serve(engine: Any, listeners: Sequence[Any] | None = None, early: Any = None, *, fleet: Any = None) -> int:
    """Serve one `engine` on the configured listeners (bound now when not given); returns when the server stops."""
    from engine.http.engine_backend import EngineBackend

    return run_app(EngineBackend(engine), listeners, early, fleet=fleet)


def serve_dp(
    record: Any, listeners: Sequence[Any] | None = None, early: Any = None, *, fleet: Any = None
) -> int | None:
    """Serve `record` with data-parallel replicas when its dp_size is above 1; None (nothing done) otherwise.

    Publishes the record with role `dp_controller`, starts the replicas, serves until
    SIGTERM/SIGINT, then stops every replica (each flushes its HiCache write-back).
    Returns the exit status.
    """
    if to_bags(record)["parallel"].dp_size <= 1:  # the launch value; nothing is published yet
        return None
    from engine.dp.controller import ROLE, DPController
    from engine.dp.group_backend import ReplicaGroupBackend
    from runtime.serving import configure_logs

    publish(record, role=ROLE)
    configure_logs()
    try:
        if early is not None and early.received:
            return 0  # told to stop before the replicas were started
        controller = DPController()
        try:
            return run_app(ReplicaGroupBackend(controller), listeners, early, fleet=fleet, dp_size=controller.dp_size)
        finally:
            controller.shutdown()
    finally:
        reset()


def run_app(
    backend: Any, listeners: Sequence[Any] | None = None, early: Any = None, *, fleet: Any = None, **listen_fields: Any
) -> int:
    """Serve the HTTP app around `backend` until SIGTERM/SIGINT; 0 when it served (or was stopped), 1 otherwise.

    With a separate admin listener (`admin_host`/`admin_port`) the public app has no
    admin routes and the admin app has only those (and `/health`). With `fleet` (a
    `FleetOptions`) the server applies its fleet's desired config before it serves.
    """
    from engine.engine import freeze_start_up_heap
    from engine.fleet.backend import fleet_member
    from engine.http.app import create_app
    from engine.http.lifecycle import Lifecycle
    from engine.http.listeners import serve_listeners
    from engine.http.metrics import OverrideTally

    serving = get_serving()
    own = listeners is None
    listeners = bind_listeners(serving) if listeners is None else listeners
    try:
        lifecycle, tally = Lifecycle(), OverrideTally()  # one server: its apps stop together and count together
        with fleet_member(backend, fleet, url=listeners[-1].url) as backend:
            apps = [
                create_app(backend, public=li.public, admin=li.admin, lifecycle=lifecycle, tally=tally)
                for li in listeners
            ]
            freeze_start_up_heap()  # built for good: no full collection walks it under load
            for li in listeners:
                # whatever the level: an operator must always be able to find where the server listens
                announce("server.listen", url=li.url, routes=li.name, pid=os.getpid(), **listen_fields)
            return serve_listeners(listeners, apps, backend, grace_s=serving.shutdown_grace_s, early=early)
    finally:
        if own:
            close_listeners(listeners)
