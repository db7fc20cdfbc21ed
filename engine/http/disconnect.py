"""Work that stops when its client goes away: a closed connection cancels the engine requests it asked for.

A route awaits its backend through `unless_disconnected`: once the body is read, the
only message the server can still deliver is `http.disconnect`, so waiting for it next
to the work tells us when the client closed its socket. The work is then cancelled,
and the backend's own cancellation handling takes its requests out of the scheduler at
the next step, freeing their KV. A streamed answer is cancelled by the response when
the client goes; `ClosingStreamingResponse` then closes its body generator, which
closes the backend streams, and each cancels its engine request in its `finally`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

import anyio
import structlog
from fastapi import Request
from fastapi.responses import StreamingResponse

from engine.http.errors import ClientGone  # declared there; re-exported for existing imports

log = structlog.get_logger(__name__)
T = TypeVar("T")


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
        pending: set[asyncio.Future[Any]] = {task, watch}
        await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
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


async def started(request: Request, streams: list[AsyncIterator[Any]]) -> list[Started]:
    """The streams, each run to its first piece before the answer begins (all at once).

    A refused request (too long for the context, the engine stopping) is then an error
    answer with its status, not an event after a 200. Raises ClientGone, closing every
    stream, when the client leaves while they start.
    """

    async def first(stream: AsyncIterator[Any]) -> Any:
        return await stream.__anext__()

    try:
        heads = await unless_disconnected(request, asyncio.gather(*(first(s) for s in streams)))
    except BaseException:
        for stream in streams:
            with contextlib.suppress(Exception):
                await stream.aclose()  # type: ignore[attr-defined]
        raise
    return [Started(head, stream) for head, stream in zip(heads, streams, strict=True)]


class Started:
    """A stream whose first piece was taken to start the answer: it gives that piece first.

    A class, not a generator wrapping the stream: `aclose()` reaches the backend's
    stream even when this one was never iterated (a client gone before its turn), so
    the engine request is cancelled then and there, not whenever the garbage collector
    finalises an abandoned generator.
    """

    __slots__ = ("_head", "_pending", "_stream")

    def __init__(self, head: Any, stream: AsyncIterator[Any]) -> None:
        self._head = head
        self._pending = True
        self._stream = stream

    def __aiter__(self) -> Started:
        return self

    async def __anext__(self) -> Any:
        if self._pending:
            self._pending = False
            return self._head
        return await self._stream.__anext__()

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):  # runs while its response is being cancelled
            await self._stream.aclose()  # type: ignore[attr-defined]


class ClosingStreamingResponse(StreamingResponse):
    """A StreamingResponse that always closes its body generator when the answer ends.

    Starlette cancels the body when the client disconnects but leaves the generator
    suspended; its `finally` (which cancels the engine requests it streams) would run
    only when the generator is garbage collected.
    """

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self.body_iterator.aclose()  # type: ignore[attr-defined]


def gone_response() -> Any:
    """What a route answers a client that is gone (nobody reads it; 499 as proxies log it)."""
    from fastapi.responses import Response

    return Response(status_code=499)


__all__ = ["ClientGone", "ClosingStreamingResponse", "Started", "gone_response", "started", "unless_disconnected"]
