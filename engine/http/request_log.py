"""One `http.request` log line per answer, and the config generation that served it.

A plain ASGI middleware rather than `@app.middleware("http")`: Starlette's
`BaseHTTPMiddleware` runs the route in a second task and passes each body chunk
through a zero-size memory stream, so a streamed answer whose client leaves is
cancelled while it waits on that hand-off, with its body generator left open until
the garbage collector finds it (and the engine request it streams keeps decoding).
Watching `send` directly keeps the route in the server's own task, and the duration
logged is the whole answer's, streamed or not.
"""

from __future__ import annotations

import time

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = structlog.get_logger(__name__)

GENERATION_HEADER = "x-sgconf-config-generation"
# polled by load balancers and scrapers every few seconds: logged at debug, not to drown the rest
POLL_PATHS = frozenset({"/health", "/metrics"})


def _generation() -> bytes | None:
    from runtime.context import get_context
    from runtime.errors import NotPublishedError

    try:
        return str(get_context().generation).encode()
    except NotPublishedError:  # the engine stopped and took its config with it
        return None


class RequestLogMiddleware:
    """Tags each answer with `x-sgconf-config-generation` and logs it once it is sent (or fails)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def tagged(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                generation = _generation()
                if generation is not None:
                    message = {
                        **message,
                        "headers": [*message.get("headers", ()), (GENERATION_HEADER.encode(), generation)],
                    }
            await send(message)

        try:
            await self.app(scope, receive, tagged)
        except Exception as exc:  # answered 500 by the outer handler; logged once here
            log.error("http.request", method=scope["method"], path=scope["path"], status=500, error=repr(exc))
            raise
        emit = log.debug if scope["path"] in POLL_PATHS else log.info
        emit(
            "http.request",
            method=scope["method"],
            path=scope["path"],
            status=status,
            duration_ms=round((time.perf_counter() - start) * 1000, 2),
        )


__all__ = ["GENERATION_HEADER", "POLL_PATHS", "RequestLogMiddleware"]
