"""One HiCache storage change, attach or detach: prepared, then committed or aborted.

The single engine (`engine.hicache_bridge`) and every replica of a group
(`engine.dp.replica`) change their storage tier through this one object, so both
refuse the same inputs with the same errors: `StorageRefused` (a 400 over HTTP) naming
the `$.memory.<field>` at fault, whether the cache is off or the backend cannot open
(a bad directory, a plug-in that fails to import, raises or returns no backend).
Before any of that, `attach_values` checks the attach's own values for every entry
(`Engine.attach_storage_backend`, the HTTP body, a group's coordinator): a missing
backend name or options that are not a JSON object (given as an object or as its JSON
text) are an `InvalidAttach` (a ConfigError, 422) naming the field and the value.

Prepare opens and validates the new backend and touches nothing else; commit makes it
live (or flushes and closes the attached one, for a detach); abort releases what
prepare opened and removes a directory it created. Commit runs right after the config
swap, so a commit that fails rolls the config back (`RuntimeContext.commit(effect=)`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.errors import InvalidAttach, StorageRefused
from sgconf.dump import clipped_repr
from sgconf.errors import Problem

ATTACH_SOURCE = "hicache.attach"
DETACH_SOURCE = "hicache.detach"
BACKEND_FIELD = "hicache_storage_backend"
EXTRA_FIELD = "hicache_storage_backend_extra_config"
DETACH_VALUES: Mapping[str, None] = {BACKEND_FIELD: None, EXTRA_FIELD: None}


def checked_attach(backend: Any, extra_config: Any) -> tuple[str, dict[str, Any] | None]:
    """The backend name and its options of an attach, checked; raises InvalidAttach naming each bad field and value.

    The options may be an object or its JSON text (blank text is none); they are
    converted as the setting's own values are (`sgconf.convert`: JSON only, so no NaN).
    """
    problems: list[Problem] = []
    if backend is None:
        problems.append(Problem(f"$.memory.{BACKEND_FIELD}", "required -- name the backend to attach (file or memory)"))
    elif not isinstance(backend, str):
        problems.append(
            Problem(
                f"$.memory.{BACKEND_FIELD}",
                f"expected a string, got {clipped_repr(backend, 80)} -- name the backend to attach",
            )
        )
    from mem_cache.hicache.backends import storage_options
    from mem_cache.hicache.errors import StorageAttachError

    options: dict[str, Any] | None = None
    try:
        options = storage_options(extra_config)  # the one check of a backend's options
    except StorageAttachError as exc:
        problems.append(Problem(f"$.memory.{EXTRA_FIELD}", str(exc)))
    if problems:
        raise InvalidAttach(problems, header="invalid attach request")
    return backend, options


def attach_values(
    backend: str | None,
    *,
    extra_config: Mapping[str, Any] | str | None = None,
    prefetch_policy: str | None = None,
    write_policy: str | None = None,
) -> dict[str, Any]:
    """The override of an attach: the backend, its options (default `dir` filled in) and the policies given.

    The values are checked first (`checked_attach`). The default directory is part of
    the override, so the status and `/server_info` show the directory in use and every
    replica of a group records the same one.
    """
    from mem_cache.hicache.file_storage import with_default_dir

    name, options = checked_attach(backend, extra_config)
    values: dict[str, Any] = {BACKEND_FIELD: name, EXTRA_FIELD: with_default_dir(name, options)}
    if prefetch_policy is not None:
        values["hicache_storage_prefetch_policy"] = prefetch_policy
    if write_policy is not None:
        values["hicache_write_policy"] = write_policy
    return values


def hicache_off() -> StorageRefused:
    """The refusal of a storage change on an engine built without the hierarchical cache."""
    msg = "the hierarchical cache is off -- start with --enable-hierarchical-cache to attach storage"
    return StorageRefused([Problem("$.memory.enable_hierarchical_cache", msg)], header="storage backend refused")


def storage_refused(exc: OSError) -> StorageRefused:
    """A storage error as a StorageRefused with the `$.memory.<field>` path it names."""
    field = getattr(exc, "field", None) or BACKEND_FIELD
    path = f"$.memory.{field}" if field.startswith("hicache_") else f"$.{field}"
    return StorageRefused([Problem(path, str(exc))], header="storage backend refused")


class StorageChange:
    """An attach or a detach of one HiCache controller's storage backend; see the module docstring."""

    def __init__(self, controller: Any, prepared: Any | None) -> None:
        self.controller = controller
        self.prepared = prepared  # the opened backend of an attach; None for a detach

    @classmethod
    def prepare(cls, controller: Any | None, values: Mapping[str, Any]) -> StorageChange:
        """Open the backend `values` name (or plan a detach when it is None); raises StorageRefused, opening nothing."""
        if controller is None:
            raise hicache_off()
        backend = values.get(BACKEND_FIELD)
        if backend is None:
            return cls(controller, None)
        try:
            prepared = controller.prepare_attach(
                backend,
                values.get(EXTRA_FIELD),
                prefetch_policy=values.get("hicache_storage_prefetch_policy"),
                write_policy=values.get("hicache_write_policy"),
            )
        except OSError as exc:
            raise storage_refused(exc) from None
        return cls(controller, prepared)

    @property
    def attaches(self) -> bool:
        return self.prepared is not None

    def commit(self) -> None:
        """Make the change live: the prepared backend attached, or the attached one flushed and closed."""
        if self.prepared is None:
            self.controller.detach_storage_backend()
        else:
            self.controller.commit_attach(self.prepared)

    def abort(self) -> None:
        """Release what prepare opened; a change the controller already settled (committed) is left to it."""
        if self.prepared is None:
            return  # a detach touches nothing before commit
        from mem_cache.hicache import AttachStateError

        try:
            self.controller.abort_attach(self.prepared)
        except AttachStateError:
            pass


__all__ = [
    "ATTACH_SOURCE",
    "DETACH_SOURCE",
    "DETACH_VALUES",
    "StorageChange",
    "attach_values",
    "checked_attach",
    "hicache_off",
    "storage_refused",
]
