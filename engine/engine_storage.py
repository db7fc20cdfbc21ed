"""The engine's HiCache storage tier: attach, detach and their status, each one drained change."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from runtime.context import use_context

if TYPE_CHECKING:
    from engine.hicache_bridge import HiCacheBridge


def under_own_context(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run an engine method under the engine's own context (see `Engine.__init__`)."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not self._owns_context:
            return method(self, *args, **kwargs)
        with use_context(self.context):
            return method(self, *args, **kwargs)

    return wrapper


class EngineStorage:
    """Mixed into `Engine`: the storage tier's life cycle goes through the engine's step boundary."""

    if TYPE_CHECKING:  # what the engine provides
        hicache: HiCacheBridge | None

        def _boundary_hold(
            self, *, drain: bool, what: str, timeout_s: float | None = None
        ) -> contextlib.AbstractContextManager[None]: ...

    @under_own_context
    def attach_storage_backend(
        self,
        backend: str,
        *,
        extra_config: dict[str, Any] | None = None,
        prefetch_policy: str | None = None,
        write_policy: str | None = None,
    ) -> Any:
        """Attach a storage backend: one override with source `hicache.attach`; all or nothing.

        The fields declare `drain`: admission pauses and running requests finish first.
        Raises DrainTimeout when they do not within `drain_timeout_s`, ConfigError for bad
        values or a backend that cannot start (bad directory): then config and cache are
        exactly as before.
        """
        from engine.storage_change import ATTACH_SOURCE, StorageChange, attach_values
        from runtime.context import get_context

        values = attach_values(
            backend, extra_config=extra_config, prefetch_policy=prefetch_policy, write_policy=write_policy
        )
        hicache = self.hicache
        if hicache is None:
            # refused as a replica group's coordinator refuses it: by the config rule naming the flag
            get_context().validate_override(ATTACH_SOURCE, **values)
            StorageChange.prepare(None, values)  # raises: the cache is off
        assert hicache is not None
        with self._boundary_hold(drain=True, what="attach a storage backend"):
            return hicache.attach(values, owner=self)

    @under_own_context
    def detach_storage_backend(self) -> Any:
        """Detach the storage backend (idempotent; pending writes are flushed first): source `hicache.detach`.

        Returns None when nothing is attached, also on an engine without the hierarchical cache.
        """
        hicache = self.hicache
        if hicache is None:
            return None
        with self._boundary_hold(drain=True, what="detach the storage backend"):
            return hicache.detach(owner=self)

    @under_own_context
    def storage_status(self) -> dict[str, Any]:
        from runtime.serving import get_memory

        mem = get_memory()
        out: dict[str, Any] = {
            "enabled": self.hicache is not None,
            "hicache_storage_backend": mem.hicache_storage_backend,
            "hicache_storage_prefetch_policy": mem.hicache_storage_prefetch_policy,
            "hicache_write_policy": mem.hicache_write_policy,
            "hicache_storage_backend_extra_config": mem.hicache_storage_backend_extra_config,
        }
        storage = self.storage_health()
        if storage is not None:
            out["storage"] = storage
        if self.hicache is not None:
            out["storage_dir"] = self.hicache.storage_dir()
            out["stats"] = self.hicache.stats()
        return out

    @under_own_context
    def storage_health(self) -> dict[str, Any] | None:
        """The attached storage tier's description (resolved location, authentication, degraded), or None."""
        return None if self.hicache is None else self.hicache.controller.storage_health()
