"""One version of the desired config onto one server, all or nothing, through the HTTP override path.

The desired fields are overrides on top of each server's launch config. Applying a
version changes what differs from what runs: hot fields in one `backend.override`
(step or drain, as each field declares, across every rank of a replica group), the
storage settings through `backend.attach` / `backend.detach`, exactly what
`POST /config/overrides` and `PUT|DELETE /hicache/storage-backend` call. A field that
an earlier version set and this one leaves out goes back to the value it had before
the fleet first changed it. When the storage step fails after the overrides went in,
the overrides are put back, so a refused version leaves the server at its last good
one (NACK); nothing is ever half applied.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Literal

import attrs
import structlog

from engine.errors import EngineError
from engine.fleet import secrets
from engine.fleet.changes import ATTACH_PATH_FIELDS, storage_problems
from engine.fleet.records import DesiredConfig
from runtime.context import get_context
from sgconf.convert import ConversionError, structure
from sgconf.dump import plain
from sgconf.errors import ConfigError
from sgconf.serving import field_info

log = structlog.get_logger(__name__)


@attrs.frozen(slots=True)
class Outcome:
    """What a server did with one version: ACK (it runs it) or NACK (it kept `applied_version`)."""

    state: Literal["ack", "nack"]
    version: int
    applied_version: int | None
    generation: int
    reason: str | None = None
    changed: tuple[str, ...] = ()


class FleetApplier:
    """Applies versions of fleet `fleet` to `backend` (a `ServingBackend`), one at a time."""

    def __init__(self, backend: Any, fleet: str) -> None:
        self._backend = backend
        self._fleet = fleet
        self._lock = threading.Lock()
        self.applied_version: int | None = None
        self.applied_fields: dict[str, Any] = {}
        # what each field held before the fleet first changed it: where a dropped field returns
        self._baseline: dict[str, Any] = {}

    def apply(self, desired: DesiredConfig) -> Outcome:
        """Apply `desired`; returns the outcome, never raises for a version this server refuses."""
        with self._lock:
            try:
                changed = self._apply(desired)
            except (ConfigError, EngineError) as exc:
                reason = str(exc)  # the engine's own message: field, value (redacted), why, what to do
                log.warning("fleet.nack", fleet=self._fleet, version=desired.version, reason=reason)
                return Outcome("nack", desired.version, self.applied_version, get_context().generation, reason)
            except Exception as exc:  # a bug must not stop the watch loop; the operator sees it in the status
                log.exception("fleet.apply_failed", fleet=self._fleet, version=desired.version)
                reason = f"the server failed while applying it ({type(exc).__name__}: {exc}) -- see the server's log"
                return Outcome("nack", desired.version, self.applied_version, get_context().generation, reason)
            self.applied_version = desired.version
            self.applied_fields = dict(desired.fields)
            log.info("fleet.ack", fleet=self._fleet, version=desired.version, changed=list(changed))
            return Outcome("ack", desired.version, desired.version, get_context().generation, None, changed)

    def _apply(self, desired: DesiredConfig) -> tuple[str, ...]:
        wanted = secrets.resolve(desired.fields)
        problems = storage_problems(wanted)
        if problems:
            raise ConfigError(problems, header="version refused, nothing changed")
        source = f"fleet.{self._fleet}@v{desired.version}"
        hot = self._hot_changes(wanted)
        storage = self._storage_change(wanted)
        ctx = get_context()
        before = {name: plain(ctx.value(name)) for name in hot}
        for name in [*hot, *(storage or {})]:
            self._baseline.setdefault(name, plain(ctx.value(name)))
        if hot:
            self._backend.override(source, dict(hot))
        if storage is None:
            return tuple(sorted(hot))
        try:
            if storage.get("hicache_storage_backend") is None:
                self._backend.detach()
            else:
                self._backend.attach(storage)
        except BaseException:
            if hot:  # the overrides went in: put them back, so the server stays at its last good version
                self._backend.override(f"{source}.undo", before)
            raise
        return tuple(sorted({*hot, *storage}))

    def _hot_changes(self, wanted: Mapping[str, Any]) -> dict[str, Any]:
        target = {n: v for n, v in wanted.items() if n not in ATTACH_PATH_FIELDS}
        for name in self.applied_fields:
            if name not in wanted and name not in ATTACH_PATH_FIELDS and name in self._baseline:
                target[name] = self._baseline[name]
        return {n: v for n, v in target.items() if not _runs(n, v)}

    def _storage_change(self, wanted: Mapping[str, Any]) -> dict[str, Any] | None:
        """The attach arguments to go to (backend None: detach), or None when storage stays as it is."""
        if any(n in wanted for n in ATTACH_PATH_FIELDS):
            target = {
                "hicache_storage_backend": wanted.get("hicache_storage_backend"),
                "hicache_storage_backend_extra_config": wanted.get("hicache_storage_backend_extra_config"),
            }
            target.update({n: wanted[n] for n in ATTACH_PATH_FIELDS[2:] if n in wanted})
        elif any(n in self.applied_fields for n in ATTACH_PATH_FIELDS):  # dropped: back to what ran before
            target = {n: self._baseline[n] for n in ATTACH_PATH_FIELDS if n in self._baseline}
        else:
            return None
        if target.get("hicache_storage_backend") is None:
            return target if get_context().value("hicache_storage_backend") is not None else None
        return None if all(_runs(n, v) for n, v in target.items()) else target


def _runs(name: str, value: Any) -> bool:
    """Whether `name` already holds `value` here (as the field's type reads it)."""
    try:
        return plain(structure(value, field_info(name))) == plain(get_context().value(name))
    except ConversionError:
        return False  # the override names what is wrong with it


__all__ = ["FleetApplier", "Outcome"]
