"""Which replica serves a request, and what happens when it cannot: the controller's request routing.

A request goes to one healthy replica, in turn (`round_robin`) or to the one with the
fewest requests in flight (`shortest_queue`), read per request from the hot
`load_balance_method`. A replica that exits or stops responding before it answers
fails its requests with `ReplicaLost` or `ReplicaUnresponsive`, and they are sent to
another healthy replica: nothing of them reached the client yet, and generation is
deterministic, so the answer is the one the first replica would have given. Each
replica is tried once, so a request that kills every replica it reaches ends there. A
stream is retried the same way until its first piece reached the caller; after that,
the failure ends the stream (the HTTP app sends it as an error event).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any

import structlog

from engine.dp.handle import Replica
from engine.dp.messages import Chunk, Generate, GenerateUnit, asks
from engine.errors import ReplicaFailed, ReplicaLost, ReplicaUnresponsive

log = structlog.get_logger("engine.dp.controller")


class RequestRouter:
    """Routes requests over `replicas` (a list the controller may update in place); see the module docstring."""

    def __init__(self, replicas: list[Replica], rids: Iterator[int] | None = None) -> None:
        self.replicas = replicas
        self._rids = itertools.count(1) if rids is None else rids
        self._turns = itertools.count()

    def pick(self) -> Replica:
        """The replica for the next request, by `load_balance_method`; raises ReplicaFailed when none is alive."""
        from runtime.serving import get_parallel

        return choose(self.replicas, get_parallel().load_balance_method, next(self._turns))

    def _route(self, tried: set[int]) -> Replica:
        """The next replica for a request that `tried` could not serve; raises ReplicaFailed when none is left."""
        from runtime.serving import get_parallel

        candidates = [r for r in self.replicas if r.index not in tried]
        try:
            replica = choose(candidates, get_parallel().load_balance_method, next(self._turns))
        except ReplicaFailed:
            if not tried:
                raise
            which = ", ".join(map(str, sorted(tried)))
            msg = (
                f"replica(s) {which} exited or stopped responding before answering and no other replica is"
                " available -- the request was not served; retry later"
            )
            raise ReplicaUnresponsive(msg) from None
        tried.add(replica.index)
        return replica

    async def generate(self, args: dict[str, Any]) -> dict[str, Any]:
        """Route one request and await its answer (raises ReplicaFailed or a replica's error).

        A request whose replica exits or stops responding before it answers is sent to
        another healthy replica: nothing of it reached the client yet, and generation is
        deterministic, so the answer is the one the first replica would have given. Each
        replica is tried once, so a request that kills every replica it reaches ends there.
        """
        (ask,) = asks([args])  # checked here by the request model, as one engine checks it
        return await self._answer(lambda rid: Generate(rid, ask))

    async def generate_many(self, argss: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Route a unit of work (a batch, the n choices of a prompt) whole to one replica; each item's answer, in order.

        One message and one answer for the unit, and the replica's scheduler shares rows
        between units as one engine's does, so a client's fan-out is held to its share
        there too. Retried on another replica like `generate`.
        """
        if len(argss) == 1:
            return [await self.generate(argss[0])]
        # checked off the event loop, as one engine does, so a large batch does not hold up other clients
        items = await asyncio.to_thread(asks, argss)
        body = await self._answer(lambda rid: GenerateUnit(rid, items))
        return list(body["items"])

    async def _answer(self, message: Callable[[int], Generate | GenerateUnit]) -> dict[str, Any]:
        tried: set[int] = set()
        while True:
            replica = self._route(tried)
            rid = next(self._rids)
            try:
                return await asyncio.wrap_future(replica.submit(message(rid)))
            except (ReplicaUnresponsive, ReplicaLost) as exc:
                log.warning("dp.request_retried", replica=replica.index, reason=type(exc).__name__)
            except asyncio.CancelledError:  # the client went away: the replica frees the request's KV
                replica.cancel(rid)
                raise

    async def stream(self, args: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """Route one request as a stream: `{"text", "token_ids"}` pieces as the replica fills them, then the answer.

        Retried like `generate` while nothing was streamed; once a piece reached the
        caller, the replica's failure is raised instead (the stream ends with an error).
        """
        loop = asyncio.get_running_loop()
        (ask,) = asks([args])
        tried: set[int] = set()
        while True:
            replica = self._route(tried)
            queue: asyncio.Queue[Chunk | None] = asyncio.Queue()

            def put(item: Chunk | None, queue: asyncio.Queue[Chunk | None] = queue) -> None:
                try:  # from the reader thread; a loop that closed has no one left to tell
                    loop.call_soon_threadsafe(queue.put_nowait, item)
                except RuntimeError:
                    pass

            rid = next(self._rids)
            try:
                future = replica.submit(Generate(rid, ask, stream=True), on_chunk=put)
            except (ReplicaUnresponsive, ReplicaLost) as exc:  # it went away since it was chosen
                log.warning("dp.request_retried", replica=replica.index, reason=type(exc).__name__)
                continue
            future.add_done_callback(functools.partial(_ended, put))
            streamed = 0
            try:
                while (chunk := await queue.get()) is not None:
                    streamed += 1
                    yield {"text": chunk.text, "token_ids": list(chunk.token_ids)}
                body = future.result()
            except (ReplicaUnresponsive, ReplicaLost) as exc:
                if streamed:
                    how = "exited" if isinstance(exc, ReplicaLost) else "stopped responding"
                    msg = (
                        f"replica {replica.index} {how} after streaming {streamed} piece(s) -- the answer is"
                        " incomplete; send the request again"
                    )
                    raise type(exc)(msg) from None
                log.warning("dp.request_retried", replica=replica.index, reason=type(exc).__name__)
                continue
            finally:
                if not future.done():  # a caller that stopped reading: the replica frees the request
                    replica.cancel(rid)
                future.cancel()
            yield body
            return


def choose(replicas: Sequence[Replica], method: str, turn: int) -> Replica:
    """The live replica for request number `turn`: in turn (round_robin), or the least busy (shortest_queue).

    Raises ReplicaFailed when no replica is alive (ReplicaUnresponsive when some are, but none responds). Ties
    in shortest_queue go to the lowest index.
    """
    alive = [r for r in replicas if r.healthy()]
    if not alive:
        if any(r.alive() for r in replicas):
            msg = "no replica is responsive -- retry later; /health names the replicas that stopped responding"
            raise ReplicaUnresponsive(msg)
        raise ReplicaFailed("no replica is alive -- restart them with POST /replicas/<index>/restart")
    if method == "shortest_queue":
        return min(alive, key=lambda r: (r.inflight, r.index))
    return alive[turn % len(alive)]


def _ended(put: Callable[[Chunk | None], None], _future: Future[dict[str, Any]]) -> None:
    put(None)  # the answer (or failure) is in: the stream's reader takes it from the future


__all__ = ["RequestRouter", "choose"]
