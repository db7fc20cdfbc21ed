"""Testing helpers: publish a test config for a block of code and restore the previous one exactly.

    with override_server_args(page_size=16, speculative_algorithm="EAGLE") as ctx:
        assert get_schedule().page_size == 16

or `ov = override_server_args(page_size=16); ov.install(); ...; ov.restore()`, or as a
decorator. The pytest plugin (`runtime.pytest_plugin`) builds its fixture and marker on it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from runtime import context as _context
from runtime.context import RuntimeContext
from runtime.roles import check_role, mode_from_env
from sgconf.registry import serving
from sgconf.resolution import resolve_once
from sgconf.schema import Schema
from sgconf.validation import build_record

SOURCE = "override_server_args"

# Installs not yet restored, innermost last; restore must pop the top.
_stack: list[ServerArgsOverride] = []

_NOT_INSTALLED: Any = object()


class ServerArgsOverride(contextlib.ContextDecorator):
    """Publishes a fresh test record carrying the given fields; `restore()` brings back the exact previous context.

    The record is the currently published one (defaults when nothing is published) with
    the fields on top, so nested overrides accumulate. `schema` picks the schema when
    nothing of it is published (default: the published one, else the serving schema);
    a published record of another schema is not built upon. The previous context object
    is put back untouched: its record, bags, overrides log, role, generation and subscribers.
    """

    def __init__(
        self,
        fields: Mapping[str, Any],
        *,
        role: str = "test",
        model: Mapping[str, Any] | None = None,
        schema: Schema | None = None,
    ) -> None:
        self.fields = dict(fields)
        self.role = role
        self.model = model
        self.schema = schema
        self.context: RuntimeContext | None = None
        self._saved: Any = _NOT_INSTALLED

    def install(self) -> RuntimeContext:
        """Build, resolve and publish the test record; raises ConfigError (nothing changed) on bad fields."""
        if self._saved is not _NOT_INSTALLED:
            raise RuntimeError("override_server_args is already installed -- restore() it before installing again")
        live = _context._current
        schema = self.schema or (live.schema if live is not None else serving())
        check_role(self.role, schema)
        mode = mode_from_env()
        with _context._lock:
            live = _context._current
            base = live.record if live is not None and live.schema is schema else None
            # build and resolve first: a bad name or value fails before anything changes
            sources = dict.fromkeys(self.fields, f"from {SOURCE}")
            record = build_record(self.fields, sources, base=base, schema=schema)
            resolved = resolve_once(record, self.model)
            ctx = RuntimeContext(record, resolved, role=self.role, role_mode=mode)
            self._saved = _context._install(ctx)
            _stack.append(self)
        self.context = ctx
        return ctx

    def restore(self) -> None:
        """Put back the context that was live before `install()`; a no-op after `runtime.reset()` forgot it.

        Raises RuntimeError when a nested override installed later is still in place.
        """
        with _context._lock:
            if self._saved is _NOT_INSTALLED:
                raise RuntimeError("override_server_args was not installed -- call install() first")
            if self not in _stack:  # runtime.reset() forgot every install
                self._saved = _NOT_INSTALLED
                self.context = None
                return
            if _stack[-1] is not self:
                raise RuntimeError(
                    "override_server_args restored out of order -- restore the innermost one first"
                )
            _stack.pop()
            _context._install(self._saved)
            self._saved = _NOT_INSTALLED
            self.context = None

    def _recreate_cm(self) -> ServerArgsOverride:
        # as a decorator: a fresh install per call, so a decorated function may recurse or run twice
        return ServerArgsOverride(self.fields, role=self.role, model=self.model, schema=self.schema)

    @property
    def installed(self) -> bool:
        return self._saved is not _NOT_INSTALLED

    def __enter__(self) -> RuntimeContext:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.restore()

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.fields.items())
        return f"override_server_args({shown})"


def override_server_args(
    values: Mapping[str, Any] | None = None,
    /,
    *,
    role: str = "test",
    model: Mapping[str, Any] | None = None,
    schema: Schema | None = None,
    **fields: Any,
) -> ServerArgsOverride:
    """A test config with `fields` set; use as a context manager, decorator, or `install()`/`restore()`.

    `role` (default "test") and `model` (an HF-style config mapping) are passed to publish;
    `schema` chooses the schema when the published one is not it (see ServerArgsOverride);
    every other keyword is a field, and `values` holds fields whose names clash with these
    options. Unknown names and bad values raise ConfigError on install, before anything changes.
    """
    return ServerArgsOverride({**(values or {}), **fields}, role=role, model=model, schema=schema)


def install_depth() -> int:
    """How many override_server_args installs are open."""
    return len(_stack)


def _forget_installs(keep: int = 0) -> None:
    """Drop open installs above depth `keep` (runtime.reset and the pytest plugin's leak recovery)."""
    del _stack[keep:]


if {"role", "model", "schema"} & set(serving().field_names()):  # pragma: no cover - guards a future declaration
    raise TypeError("a field named 'role', 'model' or 'schema' would clash with override_server_args options")


__all__ = ["ServerArgsOverride", "install_depth", "override_server_args"]
