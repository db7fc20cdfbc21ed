"""The state of one request while the scheduler moves it, and the capacity a scheduler was planned for.

`Req` is owned by the scheduler thread once submitted; its caller only waits on `done`
(or registers a callback) and reads the result after. Kept apart from the scheduler so
the state machine reads as steps over these records.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs
import structlog
import torch

from engine.request_params import SamplingParams

log = structlog.get_logger(__name__)


@attrs.frozen(slots=True)
class SchedulerLimits:
    """The capacity one scheduler was planned for, read once from the config snapshot at start-up.

    `max_running_requests` and `chunked_prefill_size` are the planned maxima: the hot
    fields of the same names are read at every step and may lower them, never raise them.
    """

    max_running_requests: int
    chunked_prefill_size: int
    max_prefill_tokens: int
    page_size: int
    max_context_len: int
    eos_token_id: int | None
    context_length: int | None = None
    # every id that ends a sequence (a checkpoint's generation_config may list several)
    eos_token_ids: tuple[int, ...] = ()


@attrs.define(slots=True, eq=False)
class Req:
    """One generation request and its progress; owned by the scheduler thread once submitted.

    A streamed request has a `stream` queue: the scheduler puts token chunks of
    `stream_interval` tokens on it as they are sampled, the rest at the end, then None.
    """

    rid: int
    prompt: list[int]
    max_new_tokens: int
    temperature: float
    generator: torch.Generator | None
    ignore_eos: bool = False
    deadline: float | None = None  # on the scheduler's clock; past it the request fails alone
    timeout_s: float | None = None
    # whether the client chose the deadline (`timeout_s`) rather than taking 'request_timeout_s':
    # running past its own budget is the client's choice (408), past the server's a server error (504)
    own_deadline: bool = False
    params: SamplingParams = SamplingParams()
    output: list[int] = attrs.Factory(list)
    row: int | None = None
    kv_len: int = 0
    draft_kv_len: int = 0
    matched_len: int = 0
    swa_gap: tuple[int, int] = (0, 0)  # positions [a, b) whose SWA slots were released (page multiples)
    cached_tokens: int = 0
    prefetched_tokens: int = 0
    node: Any = None
    spec_steps: int = 0
    spec_emitted: int = 0
    retractions: int = 0
    finish_reason: str | None = None
    error: str | None = None
    submitted: float = attrs.Factory(time.perf_counter)
    first_token_at: float | None = None
    finished_at: float | None = None
    done: threading.Event = attrs.Factory(threading.Event)
    stream: queue.SimpleQueue[list[int] | None] | None = None
    streamed: int = 0
    group: int = 0  # the unit of work it belongs to (its batch); admission shares rows between units
    callbacks: list[Callable[[], None]] = attrs.Factory(list)

    def add_done_callback(self, callback: Callable[[], None]) -> None:
        """Call `callback` (from any thread) once the request is finished; at once if it already is.

        It may be called twice when it races with the end; callers make it idempotent.
        """
        self.callbacks.append(callback)
        if self.done.is_set():
            callback()

    def push_chunks(self, interval: int) -> None:
        """Put every whole chunk of `interval` new tokens on the stream (a no-op unless streamed)."""
        if self.stream is None:
            return
        interval = max(1, int(interval))
        while len(self.output) - self.streamed >= interval:
            self.stream.put(self.output[self.streamed : self.streamed + interval])
            self.streamed += interval

    def complete(self) -> None:
        """Wake the caller: the stream gets the tokens not yet sent and its end marker."""
        if self.stream is not None:
            if len(self.output) > self.streamed:
                self.stream.put(self.output[self.streamed :])
                self.streamed = len(self.output)
            self.stream.put(None)
        self.done.set()
        # fired once, then dropped: a waiter's callback often holds its unit (and so this request),
        # and a finished request kept in that cycle would wait for a full collection to be freed
        callbacks, self.callbacks = self.callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception as exc:  # a waiter's failure must never fail the step that finished the request
                log.warning("scheduler.callback_failed", rid=self.rid, error=repr(exc))

    @property
    def all_ids(self) -> list[int]:
        return self.prompt + self.output

    @property
    def slot_row(self) -> int:
        """The request's row in the req-to-token table; only asked for while it holds one."""
        assert self.row is not None, f"request {self.rid} holds no request row"
        return self.row

    @property
    def prefill_target(self) -> int:
        """Tokens that need KV before the first decode step: everything but the newest token."""
        return len(self.prompt) + len(self.output) - 1


__all__ = ["Req", "SchedulerLimits"]
