"""Streamed generation: the token chunks of one request, as the scheduler samples them.

The scheduler puts a chunk on the request's queue each time `stream_interval` new
tokens are in (the value of the step that filled it, so an override changes the next
chunk), the remainder when the request ends, then an end marker. `TokenStream` is
the consumer's side: an iterator of `StreamChunk`s, each with its token ids and the
text they add. Text is decoded from all tokens so far and a trailing partial UTF-8
character is held back until it completes, so the pieces concatenate to the final text.
A request with `stop` strings ends at the first one (the scheduler stops it there); the
text is cut before it, and a streamed piece that could still begin one is held back
until it cannot (`StopCutter`), so streamed and whole answers agree.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import attrs

from engine.errors import WaitTimedOut


class Decoder(Protocol):
    def decode(self, ids: list[int]) -> str: ...


@attrs.frozen(slots=True)
class StreamChunk:
    """Tokens sampled since the previous chunk, and the text they add."""

    token_ids: tuple[int, ...]
    text: str


def cut_at_stop(text: str, stops: tuple[str, ...]) -> tuple[str, bool]:
    """`text` up to the first occurrence of any of `stops`, and whether one was found."""
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
    return (text, False) if cut < 0 else (text[:cut], True)


class StopCutter:
    """Cuts streamed text at the first stop string; holds back what could still begin one."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = stops
        self.text = ""
        self.sent = 0
        self.stopped = False

    def feed(self, piece: str) -> str:
        """The new text that is safe to send now."""
        if self.stopped:
            return ""
        self.text, self.stopped = cut_at_stop(self.text + piece, self.stops)
        if self.stopped:
            out, self.sent = self.text[self.sent :], len(self.text)
            return out
        hold = max((k for s in self.stops for k in range(1, len(s)) if self.text.endswith(s[:k])), default=0)
        safe = len(self.text) - hold
        out = self.text[self.sent : safe] if safe > self.sent else ""
        self.sent = max(self.sent, safe)
        return out

    def flush(self) -> str:
        """What was held back, once the text is complete."""
        out = "" if self.stopped else self.text[self.sent :]
        self.sent = len(self.text)
        return out


class TokenStream:
    """Iterate to get the chunks of one request; `result()` after the end gives the whole result.

    Iteration raises what `Engine.generate` raises (EngineStopped, GenerationError,
    TimeoutError when no chunk arrives within `timeout`).
    """

    def __init__(self, req: Any, tokenizer: Decoder, finish: Callable[[], Any], *, timeout: float | None) -> None:
        self._req = req
        self._tokenizer = tokenizer
        self._finish = finish
        self._timeout = timeout
        self._ids: list[int] = []
        self._sent = ""
        self._result: Any = None
        self._ended = False
        self._cutter = StopCutter(tuple(req.params.stop))

    @property
    def rid(self) -> int:
        return int(self._req.rid)

    @property
    def req(self) -> Any:
        """The scheduler's request (to cancel it when the consumer goes away)."""
        return self._req

    def __iter__(self) -> Iterator[StreamChunk]:
        return self

    def __next__(self) -> StreamChunk:
        if self._ended:
            raise StopIteration
        try:
            chunk = self._req.stream.get(timeout=self._timeout)
        except queue.Empty:
            raise WaitTimedOut(f"request {self.rid} sent no tokens in {self._timeout} s") from None
        if chunk is None:
            self._ended = True
            self._result = self._finish()  # raises the request's error, if it failed
            tail = self._text(final=True)
            tail = self._cutter.feed(tail) + self._cutter.flush()
            if tail:
                return StreamChunk((), tail)
            raise StopIteration
        self._ids.extend(chunk)
        return StreamChunk(tuple(chunk), self._cutter.feed(self._text(final=False)))

    def _text(self, *, final: bool) -> str:
        full = self._tokenizer.decode(self._ids)
        if not final:
            full = full.rstrip("\ufffd")  # a multi-byte character may still be arriving
        if not full.startswith(self._sent):  # bytes held back decoded differently: send nothing twice
            return ""
        piece, self._sent = full[len(self._sent) :], full
        return piece

    def result(self) -> Any:
        """The `GenerateResult`, once the stream ended (iterates what is left first)."""
        for _ in self:
            pass
        return self._result


__all__ = ["StopCutter", "StreamChunk", "TokenStream", "cut_at_stop"]
