"""Streamed generation: the token chunks of one request, as the scheduler samples them.

The scheduler puts a chunk on the request's queue each time `stream_interval` new
tokens are in (the value of the step that filled it, so an override changes the next
chunk), the remainder when the request ends, then an end marker. `TokenStream` is
the consumer's side: an iterator of `StreamChunk`s, each with its token ids and the
text they add. Text is decoded from all tokens so far and a trailing partial UTF-8
character is held back until it completes, so the pieces concatenate to the final text.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import attrs


class Decoder(Protocol):
    def decode(self, ids: list[int]) -> str: ...


@attrs.frozen(slots=True)
class StreamChunk:
    """Tokens sampled since the previous chunk, and the text they add."""

    token_ids: tuple[int, ...]
    text: str


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

    @property
    def rid(self) -> int:
        return int(self._req.rid)

    def __iter__(self) -> Iterator[StreamChunk]:
        return self

    def __next__(self) -> StreamChunk:
        if self._ended:
            raise StopIteration
        try:
            chunk = self._req.stream.get(timeout=self._timeout)
        except queue.Empty:
            raise TimeoutError(f"request {self.rid} sent no tokens in {self._timeout} s") from None
        if chunk is None:
            self._ended = True
            self._result = self._finish()  # raises the request's error, if it failed
            tail = self._text(final=True)
            if tail:
                return StreamChunk((), tail)
            raise StopIteration
        self._ids.extend(chunk)
        return StreamChunk(tuple(chunk), self._text(final=False))

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


__all__ = ["StreamChunk", "TokenStream"]
