"""The server side of a fleet: follow the desired config, apply each version, report ACK or NACK.

The agent runs its own thread and event loop, beside the HTTP server's, so a slow or
dead store never delays a request. One session with the store:

1. register the server (a key bound to a lease: `fleet status` sees who is running),
2. read the desired config and apply it when this server does not run that version yet,
3. write the status (ACK or NACK; `applying` first when the version waits for a drain), then
4. watch the desired key from the revision read in 2, so no version is missed, while
   refreshing the lease every `refresh_s`.

A watch on a store that stopped answering waits silently, so a failed lease refresh
(or any failed call) ends the session: the link is `degraded`, the server keeps serving
its last good config, and the agent reconnects with a backoff (0.2 s doubling to 5 s).
A new session starts again at 1, which is the resync: whatever was published while
the link was down is applied then. At start-up `start()` waits for the first session
to get in sync (up to `connect_timeout_s`), so a server that can reach its store runs
the fleet's current version before it serves; one that cannot serves its launch config,
says so in `/health`, and catches up when the store answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from typing import Any

import attrs
import structlog

from engine.fleet.apply import FleetApplier, Outcome
from engine.fleet.errors import FleetError, StoreUnavailable
from engine.fleet.records import DesiredConfig, Keys, Member, ServerStatus, decode
from engine.fleet.store import FleetStore
from sgconf.errors import ConfigError
from sgconf.serving import SERVING

log = structlog.get_logger(__name__)

BACKOFF_START_S = 0.2
BACKOFF_MAX_S = 5.0


@attrs.frozen(slots=True)
class FleetOptions:
    """How a server joins its fleet (`--fleet`, `--fleet-store`, `--fleet-server-id`)."""

    name: str
    store: str
    server_id: str
    connect_timeout_s: float = 10.0
    store_timeout_s: float = 2.0
    lease_ttl_s: int = 5
    refresh_s: float = 1.0


class FleetAgent:
    """Keeps one server at its fleet's desired config; see the module docstring."""

    def __init__(self, backend: Any, options: FleetOptions, *, url: str = "") -> None:
        self.options = options
        self.url = url
        self.applier = FleetApplier(backend, options.name)
        self._mutex = threading.Lock()
        self._link = "connecting"
        self._error: str | None = None
        self._down_since: float | None = None
        self._desired_version: int | None = None
        self._outcome: Outcome | None = None
        self._in_sync = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = time.time()
        self._session_synced = False

    # -- lifecycle (called from the serving thread) ---------------------------------------

    def start(self) -> bool:
        """Start following the store; returns once in sync (True) or after `connect_timeout_s` (False)."""
        loop_ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(loop_ready,), name="fleet-agent", daemon=True)
        self._thread.start()
        loop_ready.wait()
        synced = self._in_sync.wait(self.options.connect_timeout_s)
        if not synced:
            log.warning(
                "fleet.start_unsynced",
                fleet=self.options.name,
                store=self.options.store,
                detail=f"serving the launch config: the store did not answer within {self.options.connect_timeout_s}s"
                " -- the server applies the fleet's version once it does",
                error=self._error,
            )
        return synced

    def stop(self) -> None:
        """Leave the fleet (the member key goes) and stop the thread; the applied config stays."""
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout=self.options.store_timeout_s * 3 + 5)

    def health(self) -> dict[str, Any]:
        """The fleet part of `/health` and `/server_info`."""
        with self._mutex:
            outcome = self._outcome
            body: dict[str, Any] = {
                "name": self.options.name,
                "store": self.options.store,
                "server": self.options.server_id,
                "link": self._link,
                "desired_version": self._desired_version,
                "applied_version": self.applier.applied_version,
                "state": None if outcome is None else outcome.state,
                "reason": None if outcome is None else outcome.reason,
            }
            if self._link != "ok":
                body["error"] = self._error
                body["down_since"] = self._down_since
        return body

    def degraded_text(self) -> str | None:
        """The `/health` detail while the link is down, else None."""
        body = self.health()
        if body["link"] == "ok":
            return None
        version = body["applied_version"]
        held = "the launch config" if version is None else f"version {version}"
        return (
            f"the fleet link is degraded: {body['error']}; meanwhile this server keeps {held} of fleet"
            f" {self.options.name!r} and resyncs when the store answers"
        )

    # -- the agent thread ----------------------------------------------------------------

    def _run(self, loop_ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._stop = asyncio.Event()
        loop_ready.set()
        try:
            loop.run_until_complete(self._main())
        finally:
            loop.close()

    async def _main(self) -> None:
        assert self._stop is not None
        backoff = BACKOFF_START_S
        while not self._stop.is_set():
            store = FleetStore(self.options.store, timeout_s=self.options.store_timeout_s)
            self._session_synced = False
            try:
                await self._session(store)
            except FleetError as exc:
                self._set_down(str(exc))
            except Exception as exc:  # a failure of the client itself: the loop must go on, the link is down
                log.exception("fleet.session_failed", fleet=self.options.name)
                self._set_down(f"{type(exc).__name__}: {exc}")
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(store.close(), self.options.store_timeout_s)
            if self._session_synced:  # it was in sync until now: retry soon, then back off
                backoff = BACKOFF_START_S
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stop.wait(), backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    async def _session(self, store: FleetStore) -> None:
        assert self._stop is not None
        o = self.options
        lease = await store.join(o.name, Member(o.server_id, self.url, os.getpid(), self._started), ttl_s=o.lease_ttl_s)
        desired, _, revision = await store.desired(o.name)
        await self._handle(store, desired, resync=True)
        self._set_up()
        self._session_synced = True
        watch = await store.watch_desired(o.name, start_revision=revision + 1)
        tasks = [
            asyncio.create_task(self._follow(store, watch)),
            asyncio.create_task(self._keepalive(store, lease)),
            asyncio.create_task(self._stop.wait()),
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # a failed refresh or call: raise it, the session ends
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(watch.cancel(), o.store_timeout_s)
        if self._stop.is_set():
            with contextlib.suppress(FleetError):
                await store.leave(lease)

    async def _follow(self, store: FleetStore, watch: Any) -> None:
        key = Keys(self.options.name).desired
        events = aiter(watch)
        while True:
            try:
                event = await anext(events)
            except StopAsyncIteration:
                raise StoreUnavailable(f"the fleet store {store.url} ended the watch of {key}") from None
            except Exception as exc:  # the stream broke: the store went away
                raise StoreUnavailable(f"the watch of {key} on {store.url} broke ({exc})") from None
            if not event.kv.value:  # the desired key was deleted: nothing to apply, keep what runs
                log.warning("fleet.desired_deleted", fleet=self.options.name, key=key)
                continue
            await self._handle(store, decode(event.kv.value, DesiredConfig, key=key), resync=False)

    async def _keepalive(self, store: FleetStore, lease: Any) -> None:
        while True:
            await asyncio.sleep(self.options.refresh_s)
            await store.refresh(lease)

    async def _handle(self, store: FleetStore, desired: DesiredConfig | None, *, resync: bool) -> None:
        """Apply `desired` unless it runs here already, and write this server's status either way."""
        if desired is None:  # no version published yet: the launch config is the fleet's config
            self._in_sync.set()
            return
        with self._mutex:
            self._desired_version = desired.version
            last = self._outcome
        if last is not None and last.version == desired.version and (last.state == "ack" or not resync):
            outcome = last  # a repeat (or a resync of a version it runs): report, do not apply again
        elif not resync and self.applier.applied_version is not None and desired.version < self.applier.applied_version:
            return  # an event older than what runs (a resync applies what the store holds, even a store rebuilt anew)
        else:
            if self._may_wait(desired):  # a drain can take long: say so, so `fleet status` shows it
                await store.put_status(self.options.name, self._status("applying", desired.version))
            loop = asyncio.get_running_loop()
            # the apply may wait for a drain: off this loop, so the lease keeps being refreshed
            outcome = await loop.run_in_executor(None, self.applier.apply, desired)
            with self._mutex:
                self._outcome = outcome
        self._in_sync.set()
        await store.put_status(self.options.name, self._status(outcome.state, outcome.version, outcome))

    def _may_wait(self, desired: DesiredConfig) -> bool:
        """Whether applying `desired` may wait for a drain (its fields, or those it drops, declare `drain`)."""
        try:
            return SERVING.apply_mode({*desired.fields, *self.applier.applied_fields}) != "step"
        except ConfigError:  # a field this server does not know: refused at once
            return False

    def _status(self, state: Any, version: int, outcome: Outcome | None = None) -> ServerStatus:
        from runtime.context import get_context

        return ServerStatus(
            server=self.options.server_id,
            state=state,
            version=version,
            applied_version=self.applier.applied_version,
            url=self.url,
            pid=os.getpid(),
            generation=get_context().generation if outcome is None else outcome.generation,
            reason=None if outcome is None else outcome.reason,
            time=time.time(),
        )

    def _set_up(self) -> None:
        with self._mutex:
            was = self._link
            self._link, self._error, self._down_since = "ok", None, None
        if was != "ok":
            log.info("fleet.link_up", fleet=self.options.name, store=self.options.store, resynced=was == "degraded")

    def _set_down(self, error: str) -> None:
        with self._mutex:
            was = self._link
            self._link, self._error = "degraded", error
            self._down_since = self._down_since or time.time()
        if was != "degraded":
            log.warning("fleet.link_down", fleet=self.options.name, store=self.options.store, error=error)


__all__ = ["FleetAgent", "FleetOptions"]
