"""The serving schema's plug-in registries: storage backends and attention backends, by name.

Settings that name one (`hicache_storage_backend`, the `*attention_backend` fields) are
checked against these, so a backend an installed package registers through the entry
points below can be chosen from the command line, attached at run time, and is listed
in `--help` and `sgconf schema`. The built-in ones are registered the same way, in this
distribution's own entry points, so naming them imports nothing until one is used.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from sgconf.plugins import Registry

STORAGE_BACKEND_GROUP = "sgconf.storage_backends"
ATTENTION_BACKEND_GROUP = "sgconf.attention_backends"


class StorageBackendFactory(Protocol):
    """What `STORAGE_BACKENDS` holds: opens a HiCache storage backend from its `extra_config` object."""

    def __call__(self, extra_config: Mapping[str, Any], /) -> Any: ...


class AttentionBackendClass(Protocol):
    """What `ATTENTION_BACKENDS` holds: an `attention.base.AttentionBackend` subclass, as the class itself.

    sgconf cannot import the attention package (it needs torch), so the registry states
    what it reads of an entry: its name and whether it can run on this machine.
    """

    name: str

    def unavailable_reason(self) -> str | None: ...


# name -> factory(extra_config) of a HiCache storage backend (`mem_cache.hicache.backends`)
STORAGE_BACKENDS: Registry[StorageBackendFactory] = Registry(
    "HiCache storage backend", entry_points=STORAGE_BACKEND_GROUP
)
# name -> AttentionBackend class (`attention.registry`)
ATTENTION_BACKENDS: Registry[AttentionBackendClass] = Registry(
    "attention backend", entry_points=ATTENTION_BACKEND_GROUP
)

__all__ = [
    "ATTENTION_BACKENDS",
    "ATTENTION_BACKEND_GROUP",
    "STORAGE_BACKENDS",
    "STORAGE_BACKEND_GROUP",
    "AttentionBackendClass",
    "StorageBackendFactory",
]
