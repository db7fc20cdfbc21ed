"""Role namespace sets: which config namespaces each process role may read.

The sets belong to the schema (`schema.role("lora_worker", namespaces=["lora", "api"])`);
every schema has a `test` role that reads everything. This module checks and enforces them.

`SGCONF_ROLE_NAMESPACES` chooses the mode when a context is published:

- `off` (default): accessors hand out the snapshot itself; zero cost.
- `record`: every first read of a `(role, namespace)` pair is remembered, appended at
  once to the file named by `SGCONF_ROLE_NAMESPACES_OUT` (when set) and written to
  stderr at exit, so a run shows which roles really read what.
- `enforce`: a read outside the role's set raises `RoleViolation`.

A bad mode is an error, never a silent `off`: a typo must not switch auditing off.
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from runtime import process
from runtime.errors import RoleViolation
from runtime.snapshot import derived_method
from sgconf.errors import ConfigError, Problem
from sgconf.suggest import did_you_mean

if TYPE_CHECKING:
    from sgconf.schema import Schema

Mode = Literal["off", "record", "enforce"]
MODES: tuple[Mode, ...] = ("off", "record", "enforce")
MODE_ENV = "SGCONF_ROLE_NAMESPACES"
OUT_ENV = "SGCONF_ROLE_NAMESPACES_OUT"


def check_role(role: str, schema: Schema) -> str:
    """Return `role` when `schema` declares it; raise ConfigError with a did-you-mean otherwise."""
    sets = schema.roles()
    if role in sets:
        return role
    known = ", ".join(sorted(sets))
    msg = f"unknown role {role!r}{did_you_mean(str(role), sets)} -- use one of {known}"
    raise ConfigError([Problem("$role", msg)], header="cannot publish")


def mode_from_env(environ: Mapping[str, str] | None = None) -> Mode:
    """The role mode from `SGCONF_ROLE_NAMESPACES`.

    Raises ConfigError on a value other than off/record/enforce, and in record mode when
    `SGCONF_ROLE_NAMESPACES_OUT` names a file that cannot be appended to.
    """
    env = os.environ if environ is None else environ
    raw = env.get(MODE_ENV, "")
    text = raw.strip().lower() or "off"
    if text not in MODES:
        msg = f"expected one of 'off', 'record', 'enforce', got {raw!r}"
        raise ConfigError([Problem(f"$env.{MODE_ENV}", msg, f"from env {MODE_ENV}")], header="bad role namespace mode")
    out = env.get(OUT_ENV)
    if text == "record" and out:
        # checked here, at publish: a failing write would otherwise surface in some config read
        try:
            with open(out, "a", encoding="utf-8"):
                pass
        except OSError as exc:
            msg = f"cannot append to {out!r} ({exc.strerror}) -- point it at a writable file, or unset it"
            raise ConfigError(
                [Problem(f"$env.{OUT_ENV}", msg, f"from env {OUT_ENV}")], header="bad role namespace mode"
            ) from None
    return text  # type: ignore[return-value]


def make_view(snapshot: Any, role: str, mode: Mode) -> Any:
    """What accessors hand out for `snapshot`: the snapshot itself when off, a checking view otherwise."""
    if mode == "off":
        return snapshot
    return guarded_view_class(snapshot.schema)(snapshot, role, mode)


class GuardedView:
    """A snapshot seen through a role: each bag read is recorded or checked first.

    Same attribute and method names as the schema's snapshot class; only used in
    record/enforce mode. Each schema gets a subclass (`guarded_view_class`).
    """

    __slots__ = ("_snapshot", "_role", "_mode", "_allowed")
    schema: Any = None

    def __init__(self, snapshot: Any, role: str, mode: Mode) -> None:
        self._snapshot = snapshot
        self._role = role
        self._mode = mode
        self._allowed = snapshot.schema.roles()[role]

    @property
    def generation(self) -> int:
        return self._snapshot.generation  # type: ignore[no-any-return]

    @property
    def snapshot(self) -> Any:
        """The unguarded snapshot underneath."""
        return self._snapshot

    def _read(self, namespace: str) -> Any:
        if self._mode == "enforce" and namespace not in self._allowed:
            allowed = ", ".join(repr(n) for n in sorted(self._allowed))
            msg = (
                f"role {self._role!r} read namespace {namespace!r} (get_{namespace}()), outside its set ({allowed}) "
                f"-- read it in a role that owns it, or add {namespace!r} to the role with "
                f"schema.role({self._role!r}, namespaces=[...])"
            )
            raise RoleViolation(msg)
        if self._mode == "record":
            record_read(self._role, namespace)
        return getattr(self._snapshot, namespace)

    def bags(self) -> dict[str, Any]:
        return {name: self._read(name) for name in self._snapshot.bag_names}

    def flat(self) -> dict[str, Any]:
        self.bags()
        return self._snapshot.flat()  # type: ignore[no-any-return]

    def fingerprint(self) -> str:
        return self._snapshot.fingerprint()  # type: ignore[no-any-return]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, GuardedView):
            other = other._snapshot
        return self._snapshot == other  # type: ignore[no-any-return]

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"GuardedView(role={self._role!r}, mode={self._mode!r}, generation={self.generation})"


def _bag_property(name: str) -> property:
    def read(self: GuardedView) -> Any:
        return self._read(name)

    read.__name__ = name
    return property(read, doc=f"The {name!r} bag, checked against the role.")


def guarded_view_class(schema: Schema) -> type[GuardedView]:
    """The role-checking view class of `schema`: one checked property per top-level bag, its derived values."""
    cls = schema._cache.get("guarded_view_class")
    if cls is None:
        body: dict[str, Any] = {"__slots__": (), "schema": schema, "__module__": __name__}
        body.update({name: _bag_property(name) for name in schema.top_level_namespaces()})
        body.update({name: derived_method(name, fn) for name, fn in schema.derived_values().items()})
        cls = type("GuardedView", (GuardedView,), body)
        schema._cache["guarded_view_class"] = cls
    return cls  # type: ignore[no-any-return]


def record_read(role: str, namespace: str) -> None:
    """Remember that `role` read `namespace`; a new pair is appended to `$SGCONF_ROLE_NAMESPACES_OUT` at once."""
    pair = (role, namespace)
    if pair in process.recorded:  # the common case takes no lock
        return
    with process.record_lock:
        if pair in process.recorded:
            return
        process.recorded.add(pair)
        if not process.report_registered:
            atexit.register(_report_at_exit)
            process.report_registered = True
        out = os.environ.get(OUT_ENV)
        if out:
            # appended at once: a worker killed by its parent never reaches atexit
            with open(out, "a", encoding="utf-8") as fh:
                fh.write(f"{role}\t{namespace}\n")


def recorded_reads() -> frozenset[tuple[str, str]]:
    """The `(role, namespace)` pairs recorded in this process."""
    return frozenset(process.recorded)


def clear_recorded() -> None:
    """Forget recorded pairs (tests)."""
    with process.record_lock:
        process.recorded.clear()


def format_report(pairs: frozenset[tuple[str, str]] | set[tuple[str, str]]) -> str:
    lines = ["sgconf role namespaces read (role namespace):"]
    lines.extend(f"  {role} {namespace}" for role, namespace in sorted(pairs))
    return "\n".join(lines) + "\n"


def _report_at_exit() -> None:
    if process.recorded:
        sys.stderr.write(format_report(process.recorded))
        sys.stderr.flush()


__all__ = [
    "MODES",
    "MODE_ENV",
    "OUT_ENV",
    "GuardedView",
    "Mode",
    "check_role",
    "guarded_view_class",
    "clear_recorded",
    "make_view",
    "mode_from_env",
    "record_read",
    "recorded_reads",
]
