"""Whether the server is stopping, and how many answers it still owes: shared by its apps and its serving loop.

On SIGTERM a load balancer must learn that the server is going away before the
socket closes, or it keeps sending requests that then fail. So the serving loop
(`engine.http.listeners`) first marks the server stopping: `/health` answers 503
with status `stopping`, every new request is refused with 503 and `Connection:
close`, and requests already in flight run on. The listeners close once none is in
flight, or when `shutdown_grace_s` ran out (what is left is then aborted).

`LifecycleMiddleware` counts the requests in flight as a plain ASGI middleware, so
a streamed answer counts until its last byte is sent, not until its headers are.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]

STOPPING_DETAIL = "the server is stopping -- retry on another server"
# always answered, stopping or not: load balancers and scrapers must see the state
UNCOUNTED_PATHS = frozenset({"/health", "/metrics"})


class Lifecycle:
    """One server's stopping flag and count of requests in flight; see the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inflight = 0
        self.stopping = False

    @property
    def inflight(self) -> int:
        return self._inflight

    def stop(self) -> None:
        """Refuse new requests from now on; `/health` says stopping."""
        self.stopping = True

    def enter(self) -> None:
        with self._lock:
            self._inflight += 1

    def leave(self) -> None:
        with self._lock:
            self._inflight -= 1


class LifecycleMiddleware:
    """ASGI middleware: counts the requests in flight, refuses new ones while stopping (`app.add_middleware`)."""

    def __init__(self, app: ASGIApp, lifecycle: Lifecycle) -> None:
        self.app = app
        self.lifecycle = lifecycle

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path") in UNCOUNTED_PATHS:
            await self.app(scope, receive, send)
            return
        if self.lifecycle.stopping:
            await _refuse(send)
            return
        self.lifecycle.enter()
        try:
            await self.app(scope, receive, send)
        finally:
            self.lifecycle.leave()


async def _refuse(send: Any) -> None:
    body = json.dumps({"detail": STOPPING_DETAIL}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
        (b"retry-after", b"1"),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})


__all__ = ["STOPPING_DETAIL", "Lifecycle", "LifecycleMiddleware"]
