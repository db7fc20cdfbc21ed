"""The serving schema's plug-in registries: storage backends and attention backends, by name.

Settings that name one (`hicache_storage_backend`, the `*attention_backend` fields) are
checked against these, so a backend an installed package registers through the entry
points below can be chosen from the command line, attached at run time, and is listed
in `--help` and `sgconf schema`. The built-in ones are registered the same way, in this
distribution's own entry points, so naming them imports nothing until one is used.
"""

from __future__ import annotations

from typing import Any

from sgconf.plugins import Registry

STORAGE_BACKEND_GROUP = "sgconf.storage_backends"
ATTENTION_BACKEND_GROUP = "sgconf.attention_backends"

# name -> factory(extra_config) of a HiCache storage backend (`mem_cache.hicache.backends`)
STORAGE_BACKENDS: Registry[Any] = Registry("HiCache storage backend", entry_points=STORAGE_BACKEND_GROUP)
# name -> AttentionBackend class (`attention.registry`)
ATTENTION_BACKENDS: Registry[Any] = Registry("attention backend", entry_points=ATTENTION_BACKEND_GROUP)

__all__ = ["ATTENTION_BACKENDS", "ATTENTION_BACKEND_GROUP", "STORAGE_BACKENDS", "STORAGE_BACKEND_GROUP"]
