"""A fleet's state as operators read it: the desired version and each server's answer to it.

`rows` joins the statuses with the members (a server whose member key is gone has
stopped, or lost its store for longer than its lease); `summary` says in one line
whether every running server runs the desired version, and names the split when not.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import attrs

from engine.fleet.changes import describe
from engine.fleet.records import DesiredConfig, Member, ServerStatus


@attrs.frozen(slots=True)
class Row:
    """One server as `fleet status` shows it."""

    server: str
    state: str  # ack, nack, applying, joining (running, no status yet)
    version: int | None
    applied_version: int | None
    alive: bool
    url: str = ""
    reason: str | None = None
    generation: int | None = None


def rows(statuses: Sequence[ServerStatus], members: Sequence[Member]) -> list[Row]:
    alive = {m.server: m for m in members}
    out = [
        Row(s.server, s.state, s.version, s.applied_version, s.server in alive, s.url, s.reason, s.generation)
        for s in statuses
    ]
    seen = {s.server for s in statuses}
    out += [Row(m.server, "joining", None, None, True, m.url) for m in members if m.server not in seen]
    return sorted(out, key=lambda r: r.server)


def in_sync(desired: DesiredConfig | None, table: Sequence[Row]) -> bool:
    """Whether every running server ACKed the desired version (trivially, before any version)."""
    if desired is None:
        return True
    live = [r for r in table if r.alive]
    return all(r.state == "ack" and r.version == desired.version for r in live)


def summary(desired: DesiredConfig | None, table: Sequence[Row]) -> str:
    live = [r for r in table if r.alive]
    if desired is None:
        return f"no version published yet; {len(live)} server(s) running their launch config"
    v = desired.version
    acked = [r for r in live if r.state == "ack" and r.version == v]
    nacked = [r for r in live if r.state == "nack" and r.version == v]
    parts = [f"{len(acked)} of {len(live)} running server(s) run version {v}"]
    if nacked:
        kept = sorted({str(r.applied_version) if r.applied_version is not None else "launch" for r in nacked})
        parts.append(f"{len(nacked)} refused it (keeping version {', '.join(kept)})")
    pending = len(live) - len(acked) - len(nacked)
    if pending:
        parts.append(f"{pending} not answered yet")
    gone = len(table) - len(live)
    if gone:
        parts.append(f"{gone} stopped")
    return "; ".join(parts)


def text(name: str, desired: DesiredConfig | None, table: Sequence[Row]) -> str:
    lines = []
    if desired is None:
        lines.append(f"fleet {name!r}: no desired version yet")
    else:
        back = f", a rollback to version {desired.rolled_back_from}" if desired.rolled_back_from is not None else ""
        ago = max(0, int(time.time() - desired.time))
        lines.append(
            f"fleet {name!r} at version {desired.version} (by {desired.author or '?'} {ago}s ago{back}):"
            f" {describe(desired.fields)}"
        )
    if table:
        width = max(len("server"), *(len(r.server) for r in table))
        lines.append(f"{'server':<{width}}  {'state':<8}  {'version':>7}  {'running':>7}  alive")
        for r in table:
            lines.append(
                f"{r.server:<{width}}  {r.state.upper():<8}  {_num(r.version):>7}  {_num(r.applied_version):>7}"
                f"  {'yes' if r.alive else 'no'}"
            )
            if r.reason:
                lines.extend(f"    {line}" for line in r.reason.splitlines())
    lines.append(summary(desired, table))
    return "\n".join(lines)


def as_json(name: str, desired: DesiredConfig | None, table: Sequence[Row]) -> dict[str, Any]:
    return {
        "fleet": name,
        "desired": None if desired is None else attrs.asdict(desired),
        "servers": [attrs.asdict(r) for r in table],
        "in_sync": in_sync(desired, table),
        "summary": summary(desired, table),
    }


def _num(value: int | None) -> str:
    return "-" if value is None else str(value)


__all__ = ["Row", "as_json", "in_sync", "rows", "summary", "text"]
