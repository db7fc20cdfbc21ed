"""`EngineBackend`: the HTTP app's backend for one engine in this process."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import AsyncIterator
from typing import Any

import anyio.to_thread
from fastapi.concurrency import run_in_threadpool

from engine.engine import Engine
from engine.errors import NoSuchReplica
from engine.http.app import local_rank_row
from engine.http.backend import Applied, EngineLoad
from engine.http.bodies import generate_body
from engine.model import run_sizes
from engine.request_units import submit_unit

ROLE = "scheduler"
STORAGE_FIELDS = ("hicache_storage_backend", "hicache_storage_backend_extra_config")


class EngineBackend:
    """Serves one engine; a config change is one override of this process's context."""

    dp_size = 1

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.vocab_size = run_sizes(engine.shape)[2]

    def health(self) -> tuple[bool, dict[str, Any]]:
        queued, running = self.engine.busy_counts()
        body: dict[str, Any] = {"status": "ok", "queued": queued, "running": running}
        storage = self.engine.storage_health()
        if storage is not None:
            body["storage"] = storage
            if storage["degraded"]:  # still serving (a miss costs a recompute), but say so
                body["status"] = "degraded"
                body["detail"] = storage_degraded_text(storage)
        return True, body

    def loads(self) -> list[EngineLoad]:
        queued, running = self.engine.busy_counts()
        usage = self.engine.usage()
        return [EngineLoad(None, queued, running, usage.get("token_usage"), usage.get("cache_hit_rate"))]

    def busy(self) -> int:
        return sum(self.engine.busy_counts())

    async def generate(self, args: dict[str, Any]) -> dict[str, Any]:
        return (await self.generate_many([args]))[0]

    async def generate_many(self, argss: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Submit every item as one unit of work and await them on the event loop, no thread held per item.

        Cancelled (the client went away), the requests leave the scheduler at its next step.
        """
        # checked and tokenized off the event loop, so a large batch does not hold up other clients' requests
        reqs = await run_in_threadpool(lambda: submit_unit(self.engine, argss))
        try:
            await self._finished(reqs)
        except BaseException:
            self.engine.cancel(reqs)
            raise
        return [generate_body(result) for result in self.engine.wait_all(reqs)]

    async def _finished(self, reqs: list[Any]) -> None:
        """Wait until every request of one unit is finished: one wake-up of the loop for the unit, not one a request."""
        if not reqs:
            return
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        finished: set[int] = set()
        lock = threading.Lock()
        count = len(reqs)  # not the list: a callback each request holds must not hold the requests

        def settle() -> None:
            if not done.done():
                done.set_result(None)

        def wake(rid: int) -> None:  # from the scheduler's thread; may come twice for one request
            with lock:
                finished.add(rid)
                last = len(finished) == count
            if last:
                with contextlib.suppress(RuntimeError):  # the loop is gone (its server stopped): nobody waits
                    loop.call_soon_threadsafe(settle)

        for req in reqs:
            req.add_done_callback(functools.partial(wake, req.rid))
        deadlines = [r.deadline for r in reqs]
        while not done.done():
            left = None if None in deadlines else max(max(deadlines) - self.engine.clock(), 0.0) + 0.01
            try:
                await asyncio.wait_for(asyncio.shield(done), left)
            except TimeoutError:  # no step ran past the deadline (a paused engine): fail it now
                await run_in_threadpool(self.engine.expire_overdue)

    async def stream(self, args: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        tokens = await run_in_threadpool(lambda: self.engine.stream(**args))
        try:
            while True:
                # each chunk blocks until the scheduler fills it, so wait for it off the event loop;
                # a cancelled wait (the client left) must not wait for a chunk that may never come
                chunk = await anyio.to_thread.run_sync(next, tokens, None, abandon_on_cancel=True)
                if chunk is None:
                    break
                yield {"text": chunk.text, "token_ids": list(chunk.token_ids)}
            yield generate_body(tokens.result())
        finally:  # the client went away mid-stream (or the stream failed): free what it holds
            if not tokens.req.done.is_set():
                self.engine.cancel([tokens.req])

    async def flush_cache(self) -> dict[str, Any]:
        freed = await run_in_threadpool(self.engine.flush_cache)
        return {"status": "flushed", "flushed_tokens": freed}

    def describe(self) -> dict[str, Any]:
        return {
            "ranks": [local_rank_row(ROLE, *STORAGE_FIELDS)],
            "pools": self.engine.memory.describe(),
            "storage": self.engine.storage_health(),
            "stats": self.engine.stats(),
        }

    def storage_status(self) -> dict[str, Any]:
        return self.engine.storage_status()

    def _applied(self, receipt: Any) -> Applied:
        fields = {c.name: c.redacted() for c in receipt.changes}
        return Applied(receipt.generation, True, (local_rank_row(ROLE),), fields)

    def attach(self, fields: dict[str, Any]) -> Applied:
        receipt = self.engine.attach_storage_backend(
            fields.get("hicache_storage_backend"),
            extra_config=fields.get("hicache_storage_backend_extra_config"),
            prefetch_policy=fields.get("hicache_storage_prefetch_policy"),
            write_policy=fields.get("hicache_write_policy"),
        )
        return self._applied(receipt)

    def detach(self) -> Applied | None:
        receipt = self.engine.detach_storage_backend()
        return None if receipt is None else self._applied(receipt)

    def override(self, source: str, fields: dict[str, Any]) -> Applied:
        return self._applied(self.engine.override_config(source, **fields))

    def abort_inflight(self, reason: str) -> int:
        return self.engine.abort_requests(reason)

    def restart_replica(self, index: int) -> dict[str, Any]:
        raise NoSuchReplica(_no_replicas(index))

    def resync_replica(self, index: int) -> dict[str, Any]:
        raise NoSuchReplica(_no_replicas(index))


def storage_degraded_text(storage: dict[str, Any]) -> str:
    """The `/health` detail of a degraded storage tier."""
    where = f" in {storage['dir']}" if storage.get("dir") else ""
    return (
        f"storage writes to the {storage['backend']} backend{where} are failing ({storage.get('last_error')});"
        f" retrying in {storage.get('retry_in_s')}s -- pages are not being stored: fix the directory or detach it"
    )


def _no_replicas(index: int) -> str:
    return f"there is no replica {index}: this server runs one engine -- start it with --dp-size N for replicas"
