"""The `sgconf serve` flags that make a server a member of a fleet.

They are options of the serve command, not settings of the schema: they say where the
server's config comes from after start-up, so they cannot themselves be overridden,
and `/server_info` shows them under `fleet`.
"""

from __future__ import annotations

import argparse
import socket
from typing import Any

from engine.fleet.agent import FleetOptions
from engine.fleet.errors import FleetError
from engine.fleet.records import check_fleet_name
from engine.fleet.store import parse_store_url
from sgconf.errors import ConfigError, Problem

DEFAULT_STORE = "etcd://127.0.0.1:2379"  # etcd's own default client address


def add_fleet_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("fleet", "follow a fleet's desired config in an etcd store (sgconf fleet ...)")
    group.add_argument(
        "--fleet",
        metavar="NAME",
        default=None,
        help="join fleet NAME: apply its desired config before serving, follow every new version",
    )
    group.add_argument(
        "--fleet-store",
        metavar="URL",
        default=None,
        help=f"the fleet store, etcd://host:port (default {DEFAULT_STORE})",
    )
    group.add_argument(
        "--fleet-server-id",
        metavar="ID",
        default=None,
        help="this server's name in the fleet's status (default HOST:PORT)",
    )
    group.add_argument(
        "--fleet-connect-timeout-s",
        metavar="S",
        type=float,
        default=10.0,
        help="how long start-up waits for the store before serving the launch config (default 10)",
    )


def fleet_options(ns: argparse.Namespace, serving: Any) -> FleetOptions | None:
    """The fleet a server was told to join (None without --fleet); raises ConfigError naming the flag."""
    name = getattr(ns, "fleet", None)
    store = getattr(ns, "fleet_store", None)
    if name is None:
        if store is not None or ns.fleet_server_id is not None:
            flag = "--fleet-store" if store is not None else "--fleet-server-id"
            raise ConfigError([Problem("$.fleet", f"{flag} needs --fleet NAME -- add --fleet, or drop {flag}")])
        return None
    problems = []
    try:
        check_fleet_name(name, flag="--fleet")
    except FleetError as exc:
        problems.append(Problem("$.fleet", str(exc), "from --fleet"))
    store = store or DEFAULT_STORE
    try:
        parse_store_url(store)
    except FleetError as exc:
        problems.append(Problem("$.fleet_store", str(exc), "from --fleet-store"))
    timeout = ns.fleet_connect_timeout_s
    if not 0 <= timeout <= 3600:
        problems.append(
            Problem(
                "$.fleet_connect_timeout_s",
                f"must be between 0 and 3600 seconds (got {timeout})",
                "from --fleet-connect-timeout-s",
            )
        )
    server_id = ns.fleet_server_id or f"{socket.gethostname()}:{serving.port}"
    if "/" in server_id or not server_id.strip():
        problems.append(
            Problem(
                "$.fleet_server_id",
                f"a server id cannot be empty or hold '/' (got {server_id!r})",
                "from --fleet-server-id",
            )
        )
    if problems:
        raise ConfigError(problems, header="bad fleet flags, nothing started")
    return FleetOptions(name, store, server_id, connect_timeout_s=timeout)


__all__ = ["DEFAULT_STORE", "add_fleet_flags", "fleet_options"]
