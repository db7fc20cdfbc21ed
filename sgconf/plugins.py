"""`Registry`: the one way to extend a runtime by name (attention backends, storage backends, any plug-in).

A registry holds named entries, each with who registered it. A name is registered once:
a second registration under it is a `DeclarationError` naming both registrants, unless
it is the very same object. Entries come from code (`registry.register(name, obj)`) or
from installed packages, through the entry-point group the registry names, loaded the
first time an entry is looked up; an entry point is only imported when its name is
asked for, so listing names stays cheap. Two installed distributions that declare the
same name in the group are refused the same way, naming both, when that name is looked
up or the names are listed: which one wins must not depend on the order packages were
installed in.

A setting whose value names an entry declares it with `setting(..., plugin=registry)`:
its value is checked against `registry.names()` when it is converted (with a did-you-mean
for a near miss), and `--help` and the JSON Schema list the names.
"""

from __future__ import annotations

import threading
from importlib import metadata
from typing import Any, Generic, TypeVar

from sgconf.errors import DeclarationError, FieldValueError, PluginUnavailable, Problem, UnknownPluginError
from sgconf.suggest import did_you_mean

T = TypeVar("T")


def _registrant(obj: Any) -> str:
    module = getattr(obj, "__module__", None) or type(obj).__module__
    name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    return f"{module}.{name}"


def _entry_point_registrant(ep: metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    name = getattr(dist, "name", None) if dist is not None else None
    return f"entry point {ep.value} (distribution {name})" if name else f"entry point {ep.value}"


class Registry(Generic[T]):
    """Named plug-ins of one kind; see the module docstring."""

    def __init__(self, kind: str, *, entry_points: str | None = None) -> None:
        self.kind = kind
        self.entry_points = entry_points
        self._entries: dict[str, tuple[T, str]] = {}
        self._lazy: dict[str, metadata.EntryPoint] | None = None
        # names two installed distributions declare differently: refused when looked up or listed
        self._clashes: dict[str, tuple[metadata.EntryPoint, ...]] = {}
        self._lock = threading.RLock()

    def register(self, name: str, obj: T, *, registrant: str | None = None) -> T:
        """Make `obj` available as `name`; returns `obj` (so it can decorate a class or a factory).

        Raises DeclarationError when another object already holds `name`, naming both.
        """
        if not isinstance(name, str) or not name.strip():
            raise DeclarationError(f"a {self.kind} needs a non-empty name, got {name!r}")
        who = registrant or _registrant(obj)
        with self._lock:
            held = self._entries.get(name)
            if held is not None and held[0] is not obj:
                msg = f"{self.kind} {name!r} is registered twice: by {held[1]} and by {who} -- pick another name"
                raise DeclarationError(msg)
            lazy = self._entry_points().get(name) if held is None else None
            self._refuse_clash(name)
            if lazy is not None and self._load(name, lazy) is not obj:
                by = _entry_point_registrant(lazy)
                msg = f"{self.kind} {name!r} is registered twice: by {by} and by {who} -- pick another name"
                raise DeclarationError(msg)
            self._entries[name] = (obj, who)
        return obj

    def unregister(self, name: str) -> None:
        """Forget `name` (a plug-in unloaded, or a test cleaning up); a no-op when it is not registered."""
        with self._lock:
            self._entries.pop(name, None)
            if self._lazy is not None:
                self._lazy.pop(name, None)
            self._clashes.pop(name, None)

    def names(self) -> tuple[str, ...]:
        """Every registered name, sorted, whether loaded yet or not; a name two distributions declare included.

        Listing never refuses (a `--help`, a schema, a did-you-mean list them all): only
        asking for a name two installed distributions declare does (`get`, `in`).
        """
        with self._lock:
            found = self._entry_points()
            return tuple(sorted({*self._entries, *found, *self._clashes}))

    def __contains__(self, name: object) -> bool:
        """Whether `name` is registered; DeclarationError when two installed distributions declare it."""
        if not isinstance(name, str):
            return False
        with self._lock:
            found = self._entry_points()
            self._refuse_clash(name)
            return name in self._entries or name in found

    def get(self, name: str, *, path: str | None = None) -> T:
        """The entry registered as `name`.

        Raises UnknownPluginError (a KeyError) with the known names and a did-you-mean for
        an unknown name, DeclarationError when two installed distributions declare it.
        An entry point that cannot be imported raises PluginUnavailable, its problem at
        `path` (the setting that named it, e.g. `$.memory.hicache_storage_backend`).
        """
        with self._lock:
            held = self._entries.get(name)
            if held is not None:
                return held[0]
            lazy = self._entry_points().get(name)
            self._refuse_clash(name)
            if lazy is not None:
                return self._load(name, lazy, path)
        raise UnknownPluginError(self.unknown_message(name))

    def registrant(self, name: str) -> str:
        """Who registered `name` (a module-qualified name, or the entry point and its distribution)."""
        self.get(name)
        with self._lock:
            return self._entries[name][1]

    def refresh(self) -> None:
        """Read the entry points of the installed packages again: a package installed since the first lookup."""
        with self._lock:
            self._lazy = None

    def unknown_message(self, name: object) -> str:
        known = self.names()
        hint = did_you_mean(str(name), known, normalize=False) if isinstance(name, str) else ""
        return f"unknown {self.kind} {name!r}{hint} -- use one of: {', '.join(known) or 'none registered'}"

    def check(self, name: Any) -> None:
        """Raise FieldValueError (a ValueError, a field check's error) unless `name` is registered; None passes."""
        try:
            registered = name is None or name in self
        except DeclarationError as exc:  # two distributions declare it: a problem of this setting, not a crash
            raise FieldValueError(str(exc)) from None
        if not registered:
            known = self.names()
            hint = did_you_mean(str(name), known, normalize=False).replace(" -- ", "; ")
            raise FieldValueError(f"must name a registered {self.kind} ({', '.join(known) or 'none registered'}){hint}")

    def _entry_points(self) -> dict[str, metadata.EntryPoint]:
        if self._lazy is None:
            found = metadata.entry_points(group=self.entry_points) if self.entry_points else ()
            by_name: dict[str, dict[str, metadata.EntryPoint]] = {}
            for ep in found:  # one target declared twice (the same object) is not a clash
                by_name.setdefault(ep.name, {}).setdefault(ep.value, ep)
            self._clashes = {n: tuple(eps.values()) for n, eps in by_name.items() if len(eps) > 1}
            self._lazy = {n: next(iter(eps.values())) for n, eps in by_name.items() if len(eps) == 1}
        return self._lazy

    def _refuse_clash(self, name: str) -> None:
        clash = self._clashes.get(name)
        if clash:
            who = " and by ".join(_entry_point_registrant(ep) for ep in clash)
            msg = (
                f"{self.kind} {name!r} is registered twice: by {who} -- uninstall one of them or rename its entry point"
            )
            raise DeclarationError(msg)

    def _load(self, name: str, ep: metadata.EntryPoint, path: str | None = None) -> T:
        try:
            obj = ep.load()
        except Exception as exc:  # a broken plug-in must say which one and why, not crash the lookup
            msg = (
                f"{self.kind} {name!r} from entry point {ep.value} cannot be loaded: {type(exc).__name__}: {exc}"
                " -- fix or reinstall the package, or choose another"
            )
            problem = Problem(path or f"${self.kind}", msg)
            raise PluginUnavailable([problem], header=f"{self.kind} not available", name=name, reason=msg) from None
        self._entries[name] = (obj, _entry_point_registrant(ep))
        return obj  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, names={list(self.names())})"


__all__ = ["Registry"]
