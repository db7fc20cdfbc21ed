"""A streamed answer whose client leaves closes its backend streams at once, never by the garbage collector.

The backend streams cancel their engine requests in their `finally`; these tests run
with the cyclic collector off, so a stream left suspended would stay open and fail them.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from fastapi.responses import StreamingResponse

from engine.http.disconnect import ClosingStreamingResponse, Started
from engine.http.openai_routes import _merged


@pytest.fixture(autouse=True)
def no_cyclic_gc() -> Iterator[None]:
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class Source:
    """A backend stream: its pieces, then a wait that never ends; records whether its `finally` ran."""

    def __init__(self, *pieces: Any) -> None:
        self.pieces = pieces
        self.closed = False

    async def stream(self) -> AsyncIterator[Any]:
        try:
            for piece in self.pieces:
                yield piece
            await asyncio.Event().wait()  # the engine is paused: no next chunk comes
        finally:
            self.closed = True


async def _started(source: Source) -> Started:
    stream = source.stream()
    return Started(await stream.__anext__(), stream)


def test_a_started_stream_gives_its_head_first_and_closes_its_source_unread() -> None:
    async def run() -> tuple[list[Any], bool, bool]:
        read, unread = Source("a", "b"), Source("x")
        first = await _started(read)
        pieces = [await first.__anext__(), await first.__anext__()]
        await (await _started(unread)).aclose()  # never iterated: closing still reaches the source
        return pieces, read.closed, unread.closed

    pieces, read_closed, unread_closed = asyncio.run(run())
    assert pieces == ["a", "b"]
    assert not read_closed and unread_closed


def test_closing_the_merged_choices_closes_every_source() -> None:
    async def run() -> list[bool]:
        sources = [Source({"text": "a"}), Source({"text": "b"}), Source({"text": "c"})]
        merged = _merged([await _started(s) for s in sources])
        assert (await merged.__anext__())[1] == {"text": "a"}
        await merged.aclose()
        return [s.closed for s in sources]

    assert asyncio.run(run()) == [True, True, True]


async def _serve_until_disconnect(response: StreamingResponse) -> list[bytes]:
    """Run `response` as a server would; the client leaves while the first body chunk is being sent.

    The send waits (a slow socket, or a middleware handing the chunk on), so the body
    generator is suspended at its `yield`, not inside an await, when the cancel comes.
    """
    sent: list[bytes] = []
    first_chunk = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await first_chunk.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            sent.append(message["body"])
            first_chunk.set()
            await asyncio.Event().wait()

    scope = {"type": "http", "asgi": {"spec_version": "2.3"}, "method": "GET", "path": "/"}
    await response(scope, receive, send)
    return sent


@pytest.mark.parametrize("closing", [True, False], ids=["closing", "starlette"])
def test_a_streamed_answer_closes_its_body_when_the_client_leaves(closing: bool) -> None:
    """Starlette leaves the body generator suspended (`closed` stays False while the response lives); ours closes it."""

    async def run() -> tuple[list[bytes], bool]:
        source = Source(b"data: 1\n\n", b"data: 2\n\n")
        kind = ClosingStreamingResponse if closing else StreamingResponse
        response = kind(source.stream(), media_type="text/event-stream")
        sent = await _serve_until_disconnect(response)
        await asyncio.sleep(0)  # let any scheduled finaliser run
        return sent, source.closed

    sent, closed = asyncio.run(run())
    assert sent[0] == b"data: 1\n\n"
    assert closed is closing
