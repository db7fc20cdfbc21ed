"""Opening HiCache storage backends by name, from the serving schema's registry of them.

The registry (`sgconf.serving.plugins.STORAGE_BACKENDS`) maps a name to a factory
`factory(extra_config) -> StorageBase`. The built-in backends (`file`, `memory`) are in
this distribution's `sgconf.storage_backends` entry points and registered here too; a
package ships its own through the same entry-point group, or calls
`register_storage_backend` (a name registered twice by two packages is an error naming both).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import structlog

from mem_cache.hicache.errors import StorageAttachError
from mem_cache.hicache.file_storage import open_file_storage
from mem_cache.hicache.mac_key import key_from_secret
from mem_cache.hicache.memory_storage import open_memory_storage
from mem_cache.hicache.storage import BACKEND_FIELD, EXTRA_CONFIG_FIELD, StorageBase
from sgconf.convert import ConversionError, converter, means_none
from sgconf.dump import clipped_repr
from sgconf.errors import DeclarationError, PluginUnavailable
from sgconf.serving.plugins import STORAGE_BACKENDS
from sgconf.suggest import did_you_mean

log = structlog.get_logger("mem_cache.hicache.storage")

BackendFactory = Callable[[Mapping[str, Any]], StorageBase]


def register_storage_backend(name: str, factory: BackendFactory) -> BackendFactory:
    """Make `factory(extra_config)` available as backend `name`; DeclarationError when another holds the name."""
    return STORAGE_BACKENDS.register(name, factory)


def create_storage_backend(
    name: str, extra_config: Mapping[str, Any] | None = None, *, mac_secret: str | None = None
) -> StorageBase:
    """Open the backend called `name` with its options; raises StorageAttachError.

    Pages are authenticated with the key of `mac_secret` when given, else with the key
    the backend keeps beside its pages (the file backend's key file), else with a key
    of this process. The error names the config field at fault, the value given and
    what to do, and nothing is left behind (no directory created for an unknown
    backend or a weak secret).
    """
    try:
        known_name = isinstance(name, str) and name in STORAGE_BACKENDS
    except DeclarationError as exc:  # two installed distributions declare it
        raise StorageAttachError(str(exc), field=BACKEND_FIELD, value=name) from None
    if not known_name:
        known = STORAGE_BACKENDS.names()
        hint = did_you_mean(str(name), known) if isinstance(name, str) else ""
        msg = (
            f"unknown storage backend {name!r} for '{BACKEND_FIELD}'"
            f" -- use one of {', '.join(known)}{hint.replace(' -- ', '; ')}"
        )
        raise StorageAttachError(msg, field=BACKEND_FIELD, value=name)
    extra_config = storage_options(extra_config) or {}
    key = key_from_secret(mac_secret) if mac_secret is not None else None
    backend = _open(name, extra_config)
    try:
        if key is not None:
            backend.use_mac_key(key, source="setting")
        else:
            stored = backend.stored_mac_key()
            if stored is not None:
                backend.use_mac_key(stored, source=backend.stored_key_source)
    except BaseException:
        backend.abandon()
        raise
    log.info("hicache.storage.open", backend=name, options=sorted(extra_config), mac_key_source=backend.key_source)
    return backend


def storage_options(extra_config: Any) -> dict[str, Any] | None:
    """A backend's options, checked: a JSON object or its JSON text; None when there are none.

    The one check of them, for opening a backend and for every attach
    (`engine.storage_change.checked_attach`). They are converted as the setting's own
    values are (`sgconf.convert`: JSON only, so no NaN); None, blank text and the
    setting's words for none (`null`, `none`) are no options. Raises StorageAttachError
    naming the field and the value.
    """
    if extra_config is None or (
        isinstance(extra_config, str) and (not extra_config.strip() or means_none(extra_config))
    ):
        return None
    try:
        return dict(converter.structure(extra_config, dict[str, Any]))
    except (ConversionError, ValueError, TypeError) as exc:
        msg = f'{exc}, got {clipped_repr(extra_config, 80)} -- pass an object like {{"dir": "/path"}}'
        raise StorageAttachError(msg, field=EXTRA_CONFIG_FIELD, value=extra_config) from None


def _open(name: str, extra_config: Mapping[str, Any]) -> StorageBase:
    """The backend `name`'s factory called on `extra_config`; whatever keeps it from opening is a StorageAttachError.

    A factory is often another package's code: a plug-in that fails to import, raises
    (a ValueError for an option it dislikes) or hands back no backend is refused naming
    the backend, as a bad directory is, never a crash of the attach.
    """
    try:
        factory = STORAGE_BACKENDS.get(name)  # the refusal below names the field
    except PluginUnavailable as exc:
        raise StorageAttachError(exc.reason, field=BACKEND_FIELD, value=name) from None
    except DeclarationError as exc:  # two installed distributions declare it
        raise StorageAttachError(str(exc), field=BACKEND_FIELD, value=name) from None
    try:
        backend = factory(extra_config)
    except StorageAttachError:
        raise
    except Exception as exc:
        msg = (
            f"storage backend {name!r} failed to open: {type(exc).__name__}: {exc}"
            f" -- check its options in '{EXTRA_CONFIG_FIELD}', or choose another backend"
        )
        raise StorageAttachError(msg, field=BACKEND_FIELD, value=name) from exc
    if not isinstance(backend, StorageBase):
        msg = (
            f"storage backend {name!r} gave {type(backend).__name__}, not a storage backend"
            " -- its factory must return a StorageBase; fix the plug-in or choose another backend"
        )
        raise StorageAttachError(msg, field=BACKEND_FIELD, value=name)
    return backend


register_storage_backend("file", open_file_storage)
register_storage_backend("memory", open_memory_storage)

__all__ = ["STORAGE_BACKENDS", "BackendFactory", "create_storage_backend", "register_storage_backend"]
