"""`FleetBackend`: a server's backend as a member of a fleet; the link to the store shows in `/health`.

It wraps the backend that does the work (one engine or a replica group) and passes
every call through; only `health` and `describe` add the fleet's part. While the
store is unreachable the server still serves (200), with `"status": "degraded"` and a
detail saying which version it keeps, as a degraded storage tier does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from engine.fleet.agent import FleetAgent, FleetOptions


class FleetBackend:
    """`inner` (a `ServingBackend`) plus the fleet `agent` that keeps it at the desired config."""

    def __init__(self, inner: Any, agent: FleetAgent) -> None:
        self.inner = inner
        self.agent = agent
        self.dp_size = inner.dp_size

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def health(self) -> tuple[bool, dict[str, Any]]:
        ok, body = self.inner.health()
        body = {**body, "fleet": self.agent.health()}
        detail = self.agent.degraded_text()
        if detail is not None and body.get("status") == "ok":
            body["status"] = "degraded"
            body["detail"] = detail
        elif detail is not None:  # already degraded or unhealthy for another reason: say both
            body["detail"] = f"{body.get('detail', body['status'])}; {detail}"
        return ok, body

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "fleet": self.agent.health()}


@contextlib.contextmanager
def fleet_member(backend: Any, options: FleetOptions | None, *, url: str = "") -> Iterator[Any]:
    """`backend` as a member of the fleet `options` names (in sync with it, or past the connect timeout), or as it is."""
    if options is None:
        yield backend
        return
    agent = FleetAgent(backend, options, url=url)
    agent.start()
    try:
        yield FleetBackend(backend, agent)
    finally:
        agent.stop()


__all__ = ["FleetBackend", "fleet_member"]
