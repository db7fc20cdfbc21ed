"""What the HTTP app serves: the `ServingBackend` protocol and the shape of a config change.

`engine.http.app.create_app` declares every route once; a backend supplies the work
behind them. `EngineBackend` (`engine.http.engine_backend`) runs one engine in this
process; `ReplicaGroupBackend` (`engine.dp.group_backend`) routes to replica processes
and propagates config changes to all of them. Both answer with the same shapes, so a
client cannot tell which one it talks to except by `dp_size`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

import attrs


@attrs.frozen(slots=True)
class Applied:
    """A committed config change: the generation it made and what every rank reported after it."""

    generation: int
    consistent: bool
    ranks: tuple[dict[str, Any], ...]
    fields: dict[str, Any] = attrs.field(factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "consistent": self.consistent,
            "ranks": list(self.ranks),
            "fields": self.fields,
        }


@attrs.frozen(slots=True)
class EngineLoad:
    """One engine's queue and pool use: `replica` is its index in a group, None for a server's only engine.

    `node` is set only when the group spans nodes (`--nnodes`).

    In a group each value is the replica's last report (`replica_heartbeat_interval_s` old
    at most); a gauge it does not have (no prefix cache) is None and not exported.
    """

    replica: int | None
    queued: int
    running: int
    token_usage: float | None = None
    cache_hit_rate: float | None = None
    node: int | None = None  # the node a replica runs on, in a group that spans nodes


class ServingBackend(Protocol):
    """The work behind the routes; blocking methods run on the app's thread pool.

    Methods raise the exceptions of `engine.errors` (or `sgconf.errors.ConfigError`);
    the app turns them into answers by type.
    """

    dp_size: int
    vocab_size: int | None  # the served model's: token ids at or above it are refused at the edge

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Whether the server can serve, and the body of `/health`."""
        ...

    def busy(self) -> int:
        """Requests not answered yet, across every engine (a stopping server waits for none)."""
        ...

    async def generate(self, args: dict[str, Any]) -> dict[str, Any]:
        """Run one engine request (`Engine.submit`'s arguments as plain data) and return its answer."""
        ...

    async def generate_many(self, argss: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Run several as one unit of work (a batch, n choices); cancelled, they leave the scheduler."""
        ...

    def stream(self, args: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """Run one request as a stream: `{"text", "token_ids"}` pieces, then the `/generate` answer."""
        ...

    def loads(self) -> list[EngineLoad]:
        """What each engine behind the backend holds now, for the gauges of `/metrics` (read cheaply)."""
        ...

    async def flush_cache(self) -> dict[str, Any]:
        """Empty the prefix cache(s); raises EngineBusy while requests run."""
        ...

    def describe(self) -> dict[str, Any]:
        """The backend's part of `/server_info`: `ranks` always, then what it has (pools, replicas)."""
        ...

    def storage_status(self) -> dict[str, Any]:
        """The HiCache storage settings in force (and per-rank rows for a group)."""
        ...

    def attach(self, fields: dict[str, Any]) -> Applied:
        """Attach a storage backend: one override with source `hicache.attach`, all or nothing."""
        ...

    def detach(self) -> Applied | None:
        """Detach the storage backend (source `hicache.detach`); None when none was attached."""
        ...

    def override(self, source: str, fields: dict[str, Any]) -> Applied:
        """A post-publish override of hot fields, all or nothing."""
        ...

    def restart_replica(self, index: int) -> dict[str, Any]:
        """Start a new process for an exited replica; raises NoSuchReplica without replicas."""
        ...

    def abort_inflight(self, reason: str) -> int:
        """Fail every request not yet answered with EngineStopped(`reason`) (a stopping server's grace ran out)."""
        ...

    def resync_replica(self, index: int) -> dict[str, Any]:
        """Bring a running replica to the group's config; raises NoSuchReplica without replicas."""
        ...
