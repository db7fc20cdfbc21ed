"""Work that stops when its client goes away: a closed connection cancels the engine requests it asked for.

A route awaits its backend through `unless_disconnected`: once the body is read, the
only message the server can still deliver is `http.disconnect`, so waiting for it next
to the work tells us when the client closed its socket. The work is then cancelled,
and the backend's own cancellation handling takes its requests out of the scheduler at
the next step, freeing their KV. Streamed answers need nothing of this: the response
stops its body generator when the client goes, and the backend cancels in its `finally`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Any, TypeVar

import structlog
from fastapi import Request

log = structlog.get_logger(__name__)
T = TypeVar("T")


class ClientGone(Exception):
    """Raised when the client closed its connection before its answer was ready."""


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """The result of `work`, or ClientGone (with `work` cancelled) when the client disconnects first."""
    task: asyncio.Future[T] = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
        watch.cancel()
    if task.done() and not task.cancelled():
        return task.result()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    log.info("http.client_gone", path=request.url.path)
    raise ClientGone(request.url.path)


def gone_response() -> Any:
    """What a route answers a client that is gone (nobody reads it; 499 as proxies log it)."""
    from fastapi.responses import Response

    return Response(status_code=499)


__all__ = ["ClientGone", "gone_response", "unless_disconnected"]
