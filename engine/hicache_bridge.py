"""The engine's side of HiCache: feed the prefix cache from host/storage, back finished prefixes up.

`mem_cache.hicache.HiCacheController` moves pages; this module decides when, and keeps
the config in step: attaching storage is one post-publish override with source
`hicache.attach`, detaching one with `hicache.detach`. Attach is all or nothing: the
override is validated first, then the backend is opened (`StorageChange.prepare`, the
same object each replica of a group uses), then the override is committed and only
then the backend; any failure aborts the opened backend and leaves config and cache
exactly as they were.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from engine.storage_change import (
    ATTACH_SOURCE,
    BACKEND_FIELD,
    DETACH_SOURCE,
    DETACH_VALUES,
    EXTRA_FIELD,
    StorageChange,
)

log = structlog.get_logger(__name__)


class HiCacheBridge:
    """Connects the engine's prefix cache and allocator to a HiCacheController."""

    def __init__(self, engine: Any, controller: Any) -> None:
        self.engine = engine
        self.controller = controller
        self.prefix_hits = 0  # requests that got pages from host/storage
        self.loaded_tokens = 0
        self.prefetched_pages = 0

    @classmethod
    def create(cls, engine: Any, snap: Any) -> HiCacheBridge:
        """Build the controller from the snapshot's memory bag; attach the launch-time backend if one is set."""
        from mem_cache.hicache import HiCacheController

        mem = snap.memory
        # The host tier always keeps pages per layer and copies them with plain tensor copies
        # (hybrid models mix layer geometries); say so rather than silently ignore the setting.
        for name, used in (("hicache_mem_layout", "layer_first"), ("hicache_io_backend", "direct")):
            if getattr(mem, name) != used:
                log.warning("hicache.setting_not_supported", field=name, value=getattr(mem, name), using=used)
        controller = HiCacheController(
            engine.memory.kv_pool,
            page_size=engine.memory.page_size,
            device_tokens=engine.memory.max_total_tokens,
            hicache_ratio=float(mem.hicache_ratio),
            hicache_size=int(mem.hicache_size),
            write_policy=mem.hicache_write_policy,
            prefetch_policy=mem.hicache_storage_prefetch_policy,
            prefetch_timeout_s=float(mem.hicache_storage_prefetch_timeout_s),
            read_timeout_s=float(mem.hicache_storage_read_timeout_s),
            mac_secret=mem.hicache_storage_mac_key,
        )
        if mem.hicache_storage_backend is not None:
            values = {
                "hicache_storage_backend": mem.hicache_storage_backend,
                "hicache_storage_backend_extra_config": mem.hicache_storage_backend_extra_config,
            }
            try:
                StorageChange.prepare(controller, values).commit()  # refused as a live attach would be
            except BaseException:
                controller.close()
                raise
        return cls(engine, controller)

    # -- scheduler hooks -------------------------------------------------------------------

    def load_prefix(self, ids: list[int], matched: int, limit: int, sched: Any) -> int:
        """Extend a device prefix match of `matched` tokens from host/storage; returns tokens loaded.

        Loaded pages go into fresh device slots and into the prefix cache, so the caller's
        next match sees them. Nothing is loaded when the slots cannot be found.
        """
        ctl = self.controller
        want = ids[:limit]
        available = ctl.lookup(want)
        if available <= matched:
            return 0
        if ctl.storage_backend is not None:
            # the policy decides how long to wait; only what reached host by then is loaded,
            # so best_effort and timeout never block a step on storage reads
            result = ctl.prefetch(want)
            self.prefetched_pages += result.fetched_pages
            available = min(available, result.ready_tokens)
            if available <= matched:
                return 0
        need = available - matched
        cache = sched.cache
        match = cache.match(ids, limit=matched)
        cache.lock(match.node)  # eviction below must not take the prefix we extend
        try:
            slots = sched.alloc_with_eviction(lambda: sched.allocator.alloc(need), need)
        finally:
            cache.unlock(match.node)
        if slots is None:
            return 0
        loaded = ctl.load(want, available, slots, start=matched)
        if loaded < need:
            sched.allocator.free(slots[loaded:])
        if loaded == 0:
            return 0
        spare = cache.insert(ids[: matched + loaded], [*match.slots, *slots[:loaded].tolist()])
        if spare:
            sched.allocator.free(spare)
        self.prefix_hits += 1
        self.loaded_tokens += loaded
        log.debug("hicache.load", tokens=loaded, matched=matched)
        return loaded

    def start_prefetch(self, ids: list[int]) -> None:
        """Start reading the storage pages of a newly queued request; returns at once.

        Reads overlap the request's wait in the queue, so a best_effort or timeout
        prefetch at admission finds more pages already in host.
        """
        if self.controller.storage_backend is not None:
            self.controller.prefetch(ids, policy="best_effort")

    def backup_prefix(self, ids: list[int], sched: Any) -> None:
        """Copy the cached pages of a finished request's tokens to host (and storage per policy).

        Only pages that still hold their SWA K/V are copied: the others were copied by
        `backup_pages` before their SWA slots were released, and a copy now would store
        whatever the released SWA slots hold.
        """
        match = sched.cache.match(ids)
        for start, end in match.live_runs(self.controller.page_size):
            self.controller.backup(ids[:end], list(match.slots[start:end]), start=start)

    def backup_pages(self, ids: list[int], slots: Any, start: int) -> None:
        """Copy the pages of `ids[start:]` held at `slots` to host before their SWA slots are released."""
        self.controller.backup(ids, slots, start=start)

    # -- attach / detach ---------------------------------------------------------------------

    def attach(self, values: Mapping[str, Any], owner: Any = None) -> Any:
        """Validate, open, then commit config and backend together; raises ConfigError and changes nothing on failure.

        `values` is the override of the attach (`engine.storage_change.attach_values`); the
        receipt belongs to `owner` (the engine), through which it reverts.
        """
        from runtime.context import get_context

        ctx = get_context()
        proposal = ctx.validate_override(ATTACH_SOURCE, **values)
        change = StorageChange.prepare(self.controller, values)
        try:
            # the backend goes live right after the config swap; if it cannot, the config rolls back
            return ctx.commit(proposal, effect=lambda _: change.commit(), owner=owner)
        except BaseException:
            change.abort()
            raise

    def detach(self, owner: Any = None) -> Any:
        """Flush and close the backend, then set it back to None; a no-op (returns None) when none is attached."""
        from runtime.context import get_context
        from runtime.serving import get_memory

        attached = self.controller.storage_backend is not None
        if not attached and get_memory().hicache_storage_backend is None:
            return None
        ctx = get_context()
        proposal = ctx.validate_override(DETACH_SOURCE, **DETACH_VALUES)
        change = StorageChange.prepare(self.controller, DETACH_VALUES)
        # detached right after the config swap; if flushing fails, the config says attached again
        return ctx.commit(proposal, effect=lambda _: change.commit(), owner=owner)

    @staticmethod
    def touches_storage(fields: Any) -> bool:
        """Whether a change to `fields` moves the attached storage backend (so undoing it must move it back)."""
        return any(name in (BACKEND_FIELD, EXTRA_FIELD) for name in fields)

    def restore(self, receipt: Any) -> None:
        """Make the attached backend what the config says after `receipt` (a revert): detach it, or attach the one before.

        Runs as a commit effect, right after the swap: when it raises, the config rolls back.
        The previous backend is opened before the current one is detached, so a backend that
        cannot open again leaves the current one attached.
        """
        mem = receipt.snapshot.memory
        values = {
            BACKEND_FIELD: mem.hicache_storage_backend,
            EXTRA_FIELD: mem.hicache_storage_backend_extra_config,
            "hicache_storage_prefetch_policy": mem.hicache_storage_prefetch_policy,
            "hicache_write_policy": mem.hicache_write_policy,
        }
        change = StorageChange.prepare(self.controller, values)
        try:
            change.commit()  # an attach detaches (and flushes) the current backend first
        except BaseException:
            change.abort()
            raise

    def stats(self) -> dict[str, Any]:
        import attrs

        out = attrs.asdict(self.controller.stats)
        out.update(
            prefix_loads=self.prefix_hits,
            loaded_tokens=self.loaded_tokens,
            prefetch_fetched_pages=self.prefetched_pages,
        )
        out["storage_dir"] = self.storage_dir()
        return out

    def storage_dir(self) -> str | None:
        """The directory the attached `file` backend writes to (None for other backends or none)."""
        root = getattr(self.controller.storage_backend, "root", None)
        return None if root is None else str(root)

    def close(self) -> None:
        self.controller.close()


__all__ = ["ATTACH_SOURCE", "DETACH_SOURCE", "HiCacheBridge"]
