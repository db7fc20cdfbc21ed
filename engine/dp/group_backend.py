"""`ReplicaGroupBackend`: the HTTP app's backend for a group of replica processes.

Requests go to one replica (`DPController.pick`); config changes go to every rank
through the config group, all or nothing. Each replica applies a round between two of
its scheduler steps, after a drain when a field declares `drain` (attach, detach), as
one engine does; a drain that cannot finish on some replica refuses the round there
with the typed reason `drain_timeout`, and the group answers like one engine would:
`DrainTimeout` (409 with Retry-After).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from engine.dp.controller import DPController
from engine.errors import DrainTimeout, EngineBusy, Refusal
from engine.http.backend import Applied, EngineLoad
from engine.storage_change import ATTACH_SOURCE, DETACH_SOURCE, DETACH_VALUES, attach_values
from runtime.context import get_context
from runtime.errors import PropagationFailed, RanksSilent
from runtime.overrides import shown

STORAGE_FIELDS = ("hicache_storage_backend", "hicache_storage_backend_extra_config")
STORAGE_STATUS_FIELDS = (*STORAGE_FIELDS, "hicache_storage_prefetch_policy", "hicache_write_policy")


class ReplicaGroupBackend:
    """Serves the replicas of `controller`; see the module docstring."""

    def __init__(self, controller: DPController) -> None:
        self.controller = controller
        self.dp_size = controller.dp_size
        self.vocab_size = controller.vocab_size

    def health(self) -> tuple[bool, dict[str, Any]]:
        ok, rows = self.controller.health()
        _replicas, running = self.controller.busy()
        body: dict[str, Any] = {
            "status": "ok" if ok else "unhealthy",
            "queued": 0,
            "running": running,
            "replicas": rows,
        }
        if not ok:
            dead = [row["replica"] for row in rows if not row["alive"]]
            stuck = [row["replica"] for row in rows if row["alive"] and not row["responsive"]]
            parts = []
            if dead:
                parts.append(
                    f"replica(s) {', '.join(map(str, dead))} exited -- restart them with POST /replicas/<index>/restart"
                )
            if stuck:
                parts.append(
                    f"replica(s) {', '.join(map(str, stuck))} stopped responding -- they get no requests until they"
                    " report progress again; stop and restart them if they do not"
                )
            body["detail"] = "; ".join(parts)
        elif any(row["storage_degraded"] for row in rows):
            degraded = [row["replica"] for row in rows if row["storage_degraded"]]
            body["status"] = "degraded"
            body["detail"] = (
                f"storage writes fail on replica(s) {', '.join(map(str, degraded))} -- pages are not being stored:"
                " fix the storage directory or detach it"
            )
        return ok, body

    async def generate(self, args: dict[str, Any]) -> dict[str, Any]:
        return await self.controller.generate(args)

    async def generate_many(self, argss: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # one message for the unit: the replica admits it as one unit of work, as one engine does
        return await self.controller.generate_many(argss)

    def abort_inflight(self, reason: str) -> int:
        return self.controller.abort_pending(reason)

    def stream(self, args: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        # the router's own generator: closing it reaches its `finally`, which frees the replica's request
        return self.controller.stream(args)

    def loads(self) -> list[EngineLoad]:
        return self.controller.loads()

    def busy(self) -> int:
        return self.controller.busy()[1]

    async def flush_cache(self) -> dict[str, Any]:
        _, inflight = self.controller.busy()
        if inflight:
            msg = f"cannot flush the cache while requests run ({inflight} in flight) -- retry when idle"
            raise EngineBusy(msg, queued=0, running=inflight)
        rows = await self.controller.flush_cache()
        return {"status": "flushed", "flushed_tokens": sum(r["flushed_tokens"] for r in rows), "replicas": rows}

    def describe(self) -> dict[str, Any]:
        return {
            "ranks": self.controller.ranks(*STORAGE_FIELDS),
            "config_group": self.controller.group.status(),
            "replicas": self.controller.health()[1],
        }

    def storage_status(self) -> dict[str, Any]:
        ranks = self.controller.ranks(*STORAGE_STATUS_FIELDS)
        # the replicas hold the storage; the controller's role does not read the memory namespace
        first: dict[str, Any] = next(
            (r["values"] for r in ranks if r.get("rank") and r.get("alive") and r.get("values")), {}
        )
        return {name: first.get(name) for name in STORAGE_STATUS_FIELDS} | {"ranks": ranks}

    def _propagate(self, source: str, fields: dict[str, Any]) -> Applied:
        try:
            result = self.controller.propagate(source, **fields)
        except PropagationFailed as exc:
            drained = set(exc.reasons.values()) == {Refusal.DRAIN_TIMEOUT}
            if drained and not isinstance(exc, RanksSilent):
                # only drains refused: busy like one engine, with its Retry-After
                _replicas, running = self.controller.busy()
                # the controller's role reads no schedule bag; the flat value is the same setting
                timeout = float(get_context().value("drain_timeout_s"))
                lines = [line for rank in exc.reasons for line in exc.refusals[rank]]
                msg = f"{exc.header}: {'; '.join(lines)}"
                raise DrainTimeout(msg, queued=0, running=running, retry_after_s=timeout) from None
            raise
        ranks = [self.controller.rank_row(state) for state in result.ranks]
        # the controller (rank 0) committed the same override: its log has the old values of
        # the fields its role may read; the others are shown with their new value only
        log = [rec for rec in get_context().overrides_log() if rec.generation == result.generation]
        schema = get_context().schema
        changes: dict[str, Any] = {name: {"new": shown(name, value, schema)} for name, value in fields.items()}
        changes.update({c.name: c.redacted() for rec in log for c in rec.changes})
        return Applied(result.generation, result.consistent, tuple(ranks), changes)

    def attach(self, fields: dict[str, Any]) -> Applied:
        values = attach_values(
            fields.get("hicache_storage_backend"),
            extra_config=fields.get("hicache_storage_backend_extra_config"),
            prefetch_policy=fields.get("hicache_storage_prefetch_policy"),
            write_policy=fields.get("hicache_write_policy"),
        )
        return self._propagate(ATTACH_SOURCE, values)

    def detach(self) -> Applied | None:
        ranks = self.controller.ranks("hicache_storage_backend")
        if all(r.get("values", {}).get("hicache_storage_backend") is None for r in ranks if r.get("rank")):
            return None
        return self._propagate(DETACH_SOURCE, dict(DETACH_VALUES))

    def override(self, source: str, fields: dict[str, Any]) -> Applied:
        return self._propagate(source, fields)

    def restart_replica(self, index: int) -> dict[str, Any]:
        return self.controller.restart(index)

    def resync_replica(self, index: int) -> dict[str, Any]:
        return self.controller.resync(index)
