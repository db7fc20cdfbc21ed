"""The registry of HiCache storage backends: names users may choose and the factories behind them.

The built-in backends (`file`, `memory`) are registered here, by importing their
modules: they depend on `storage` for the base class and never on this module, so
imports run one way. Another backend registers with `register_storage_backend`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import structlog

from mem_cache.hicache.errors import StorageAttachError
from mem_cache.hicache.file_storage import open_file_storage
from mem_cache.hicache.memory_storage import open_memory_storage
from mem_cache.hicache.storage import BACKEND_FIELD, EXTRA_CONFIG_FIELD, StorageBase
from sgconf.suggest import did_you_mean

log = structlog.get_logger("mem_cache.hicache.storage")

BackendFactory = Callable[[Mapping[str, Any]], StorageBase]

# name -> factory(extra_config); the names users may choose are the field's Literal
STORAGE_BACKENDS: dict[str, BackendFactory] = {}


def register_storage_backend(name: str, factory: BackendFactory) -> None:
    """Make `factory(extra_config)` available as backend `name` (last registration wins)."""
    STORAGE_BACKENDS[name] = factory


def create_storage_backend(name: str, extra_config: Mapping[str, Any] | None = None) -> StorageBase:
    """Open the backend called `name` with its options; raises StorageAttachError.

    The error names the config field at fault, the value given and what to do, and
    nothing is left behind (no directory created for an unknown backend).
    """
    if not isinstance(name, str) or name not in STORAGE_BACKENDS:
        known = sorted(STORAGE_BACKENDS)
        hint = did_you_mean(str(name), known) if isinstance(name, str) else ""
        msg = (
            f"unknown storage backend {name!r} for '{BACKEND_FIELD}'"
            f" -- use one of {', '.join(known)}{hint.replace(' -- ', '; ')}"
        )
        raise StorageAttachError(msg, field=BACKEND_FIELD, value=name)
    if extra_config is None:
        extra_config = {}
    if not isinstance(extra_config, Mapping):
        msg = (
            f"'{EXTRA_CONFIG_FIELD}' must be a JSON object (got {type(extra_config).__name__}"
            f" {extra_config!r}) -- pass e.g. {{\"dir\": \"/var/cache/sgconf\"}}"
        )
        raise StorageAttachError(msg, field=EXTRA_CONFIG_FIELD, value=extra_config)
    backend = STORAGE_BACKENDS[name](extra_config)
    log.info("hicache.storage.open", backend=name, options=sorted(extra_config))
    return backend


register_storage_backend("file", open_file_storage)
register_storage_backend("memory", open_memory_storage)

__all__ = ["STORAGE_BACKENDS", "BackendFactory", "create_storage_backend", "register_storage_backend"]
