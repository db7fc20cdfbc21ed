"""`sgconf fleet`: publish, inspect and roll back a fleet's desired config.

    sgconf fleet set NAME FIELD=VALUE ... [--unset FIELD] [--expect-version N] [--wait S]
    sgconf fleet status NAME
    sgconf fleet rollback NAME VERSION [--expect-version N] [--wait S]
    sgconf fleet history NAME

`set` writes the next version: the current desired fields with the given ones on top
(`--unset` drops one, so the servers go back to their launch value). The write is a
compare-and-swap on the version read, so two operators never overwrite each other
silently; `--expect-version N` also refuses when the fleet is not at N (what the
operator last looked at). A secret field takes `@env:VAR` or `@file:PATH`, never its
value. `--wait S` waits up to S seconds for every running server to answer the new
version and prints the status.

Exit status: 0 when done (for `status`, and after `--wait`: every running server runs
the desired version), 1 when a server refused or did not answer, the store cannot be
reached or the version moved, 2 for bad input (nothing written then).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import socket
import sys
import time
from collections.abc import Sequence
from typing import Any

import attrs

from engine.fleet import changes, view
from engine.fleet.errors import FleetError
from engine.fleet.flags import DEFAULT_STORE
from engine.fleet.records import DesiredConfig, check_fleet_name
from engine.fleet.store import FleetStore

PROG = "sgconf fleet"
POLL_S = 0.02


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog=PROG, description="publish, inspect and roll back a fleet's desired config")
    sub = top.add_subparsers(dest="command", required=True, metavar="{set,status,rollback,history}")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument("name", metavar="NAME", help="the fleet")
        p.add_argument(
            "--store", metavar="URL", default=DEFAULT_STORE, help=f"the fleet store (default {DEFAULT_STORE})"
        )
        p.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
        return p

    s = command("set", "publish the next version: the current desired fields with these on top")
    s.add_argument(
        "fields", metavar="FIELD=VALUE", nargs="*", help="a hot field and its value; @env:VAR / @file:PATH for secrets"
    )
    s.add_argument(
        "--unset",
        metavar="FIELD",
        action="append",
        default=[],
        help="drop FIELD: servers go back to their launch value",
    )
    _write_flags(s)
    command("status", "the desired version and each server's answer to it")
    r = command("rollback", "publish an earlier version's fields again, as the next version")
    r.add_argument("version", metavar="VERSION", type=int, help="the version whose fields to publish")
    _write_flags(r)
    command("history", "every version published, oldest first")
    return top


def _write_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--expect-version",
        metavar="N",
        type=int,
        default=None,
        help="refuse unless the fleet is at version N (compare-and-swap on what you last saw)",
    )
    p.add_argument(
        "--wait",
        metavar="S",
        type=float,
        default=None,
        help="wait up to S seconds for every running server to answer, then print the status",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Publish, inspect and roll back a fleet's desired config (etcd); see `sgconf fleet --help`."""
    ns = parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    check_fleet_name(ns.name)
    try:
        return asyncio.run(_run(ns))
    except FleetError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1


async def _run(ns: argparse.Namespace) -> int:
    async with FleetStore(ns.store, flag="--store") as store:
        if ns.command == "status":
            return await _print_status(store, ns)
        if ns.command == "history":
            versions = await store.history(ns.name)
            if ns.format == "json":
                print(json.dumps([attrs.asdict(d) for d in versions], indent=2))
            else:
                for d in versions:
                    back = f" (rollback to {d.rolled_back_from})" if d.rolled_back_from is not None else ""
                    print(f"{d.version:>5}  {_when(d.time)}  {d.author}{back}: {changes.describe(d.fields)}")
            return 0
        if ns.command == "set":
            sets = changes.parse_assignments(ns.fields)  # bad input: ConfigError, nothing read or written
            if not sets and not ns.unset:
                print(
                    f"{PROG}: give at least one FIELD=VALUE or --unset FIELD -- e.g. schedule_policy=lpm",
                    file=sys.stderr,
                )
                return 2
            current, mod, _ = await store.desired(ns.name)
            fields = changes.merged({} if current is None else current.fields, sets, ns.unset)
            new = await store.publish(
                ns.name, fields, expect_version=ns.expect_version, author=author(), base=(current, mod)
            )
        else:
            old = await store.version(ns.name, ns.version)
            new = await store.publish(
                ns.name, old.fields, expect_version=ns.expect_version, author=author(), rolled_back_from=old.version
            )
        if ns.wait is None:
            _out(
                ns,
                f"fleet {ns.name!r}: published version {new.version}: {changes.describe(new.fields)}",
                {"fleet": ns.name, "desired": attrs.asdict(new)},
            )
            return 0
        await wait_for_answers(store, ns.name, new.version, timeout_s=ns.wait)
        return await _print_status(store, ns)


async def _print_status(store: FleetStore, ns: argparse.Namespace) -> int:
    desired, table = await fleet_state(store, ns.name)
    _out(ns, view.text(ns.name, desired, table), view.as_json(ns.name, desired, table))
    return 0 if view.in_sync(desired, table) else 1


async def fleet_state(store: FleetStore, name: str) -> tuple[DesiredConfig | None, list[view.Row]]:
    desired, _, _ = await store.desired(name)
    return desired, view.rows(await store.statuses(name), await store.members(name))


async def wait_for_answers(store: FleetStore, name: str, version: int, *, timeout_s: float) -> bool:
    """Wait until every running server answered `version` (ACK or NACK); False when `timeout_s` passed first."""
    deadline = time.monotonic() + timeout_s
    while True:
        _, table = await fleet_state(store, name)
        live = [r for r in table if r.alive]
        if all(r.version is not None and r.version >= version and r.state in ("ack", "nack") for r in live):
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(POLL_S)


def author() -> str:
    """Who publishes, as the history shows it: user@host."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def _out(ns: argparse.Namespace, text: str, data: dict[str, Any]) -> None:
    print(json.dumps(data, indent=2, default=str) if ns.format == "json" else text)


def _when(stamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp))


__all__ = ["fleet_state", "main", "parser", "wait_for_answers"]
