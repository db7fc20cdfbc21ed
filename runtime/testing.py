"""Testing helpers: publish a test config for a block of code and restore the previous one exactly.

    with override_server_args(page_size=16, speculative_algorithm="EAGLE") as ctx:
        assert get_schedule().page_size == 16

or `ov = override_server_args(page_size=16); ov.install(); ...; ov.restore()`, or as a
decorator on a plain, async, generator or async-generator function. The pytest plugin
(`runtime.pytest_plugin`) builds its fixture and marker on it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import structlog

from runtime import process
from runtime.context import RuntimeContext
from runtime.errors import LifecycleError
from runtime.roles import check_role, mode_from_env
from sgconf.errors import ConfigError
from sgconf.resolution import resolve_once
from sgconf.schema import Schema
from sgconf.validation import build_record

SOURCE = "override_server_args"

log = structlog.get_logger("sgconf.runtime")

F = TypeVar("F", bound=Callable[..., Any])

# Installs not yet restored live in `runtime.process.installs`, in install order. Each one
# knows its own place, so they may be restored in any order: one taken out from the middle
# rebuilds those above it.
_NOT_INSTALLED: Any = object()


class ServerArgsOverride:
    """Publishes a fresh test record carrying the given fields; `restore()` brings back the exact previous context.

    The record is the currently published one (defaults when nothing is published) with
    the fields on top, so nested overrides accumulate. The previous context object is
    put back untouched: its record, bags, overrides log, role, generation and subscribers.
    Installs may be restored in any order: restoring one below others rebuilds the ones
    above on what remains, so exactly their own fields stay live (their contexts are new
    objects, `.context` says which). `schema` picks the schema (default: the published
    one, else `fallback`); a published record of another schema is not built upon.
    """

    def __init__(
        self,
        fields: Mapping[str, Any],
        *,
        role: str = "test",
        model: Mapping[str, Any] | None = None,
        schema: Schema | None = None,
        fallback: Schema | None = None,
    ) -> None:
        self.fields = dict(fields)
        self.role = role
        self.model = model
        self.schema = schema
        self.fallback = fallback
        self.context: RuntimeContext | None = None
        self._saved: Any = _NOT_INSTALLED

    def _schema(self, below: RuntimeContext | None) -> Schema:
        found = self.schema or (below.schema if below is not None else self.fallback)
        if found is None:
            msg = "override_server_args() needs schema= when nothing is published -- pass the schema whose record to build"
            raise TypeError(msg)
        return found

    def _build(self, below: RuntimeContext | None) -> RuntimeContext:
        schema = self._schema(below)
        base = below.record if below is not None and below.schema is schema else None
        # build and resolve first: a bad name or value fails before anything changes
        record = build_record(self.fields, dict.fromkeys(self.fields, f"from {SOURCE}"), base=base, schema=schema)
        resolved = resolve_once(record, self.model)
        return RuntimeContext(record, resolved, role=self.role, role_mode=mode_from_env())

    def install(self) -> RuntimeContext:
        """Build, resolve and publish the test record; raises ConfigError (nothing changed) on bad fields."""
        if self._saved is not _NOT_INSTALLED:
            raise LifecycleError("override_server_args is already installed -- restore() it before installing again")
        check_role(self.role, self._schema(process.current))
        with process.lock:
            ctx = self._build(process.current)
            self._saved = process.install(ctx)
            process.installs.append(self)
        self.context = ctx
        return ctx

    def restore(self) -> None:
        """Put back the context that was live before `install()`; a no-op after `runtime.reset()` forgot it.

        Restoring an install that others were installed over takes exactly its own fields
        away: those above are rebuilt on what lies below it.
        """
        with process.lock:
            if self._saved is _NOT_INSTALLED:
                raise LifecycleError("override_server_args was not installed -- call install() first")
            stack = process.installs
            if self not in stack:  # runtime.reset() forgot every install
                self._saved = _NOT_INSTALLED
                self.context = None
                return
            at = stack.index(self)
            above = stack[at + 1 :]
            below = self._saved
            del stack[at]
            self._saved = _NOT_INSTALLED
            self.context = None
            if not above:
                process.install(below)
                return
            for later in above:
                later._rebase(below)
                below = later.context
            process.install(below)

    def _rebase(self, below: RuntimeContext | None) -> None:
        try:
            ctx = self._build(below)
        except ConfigError as exc:  # its fields no longer fit without the one restored: keep what it had
            log.warning("override_server_args.rebase_failed", fields=sorted(self.fields), error=str(exc))
            self._saved = below
            return
        self._saved = below
        self.context = ctx

    @property
    def installed(self) -> bool:
        return self._saved is not _NOT_INSTALLED

    def _fresh(self) -> ServerArgsOverride:
        # as a decorator: a fresh install per call, so a decorated function may recurse or run twice
        return ServerArgsOverride(
            self.fields, role=self.role, model=self.model, schema=self.schema, fallback=self.fallback
        )

    def __call__(self, func: F) -> F:
        """Decorate `func` so each call (or each iteration, for a generator) runs with this config live."""
        fresh = self._fresh
        if inspect.isasyncgenfunction(func):

            @functools.wraps(func)
            async def agen_wrapper(*args: Any, **kwargs: Any) -> Any:
                with fresh():
                    agen = func(*args, **kwargs)
                    try:
                        sent: Any = None
                        while True:
                            try:
                                item = await agen.asend(sent)
                            except StopAsyncIteration:
                                return
                            while True:
                                try:
                                    sent = yield item
                                    break
                                except GeneratorExit:
                                    raise
                                except BaseException as exc:  # delivered into the wrapped generator
                                    try:
                                        item = await agen.athrow(exc)
                                    except StopAsyncIteration:
                                        return
                    finally:
                        await agen.aclose()

            return agen_wrapper  # type: ignore[return-value]
        if inspect.isgeneratorfunction(func):

            @functools.wraps(func)
            def gen_wrapper(*args: Any, **kwargs: Any) -> Any:
                with fresh():
                    return (yield from func(*args, **kwargs))

            return gen_wrapper  # type: ignore[return-value]
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                with fresh():
                    return await func(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with fresh():
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

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
    fallback: Schema | None = None,
    **fields: Any,
) -> ServerArgsOverride:
    """A test config with `fields` set; use as a context manager, decorator, or `install()`/`restore()`.

    `role` (default "test") and `model` (an HF-style config mapping) are passed to publish;
    `schema` chooses the schema when the published one is not it, `fallback` the one used
    when nothing is published (see ServerArgsOverride); every other keyword is a field, and
    `values` holds fields whose names clash with these options. Unknown names and bad
    values raise ConfigError on install, before anything changes.
    """
    return ServerArgsOverride({**(values or {}), **fields}, role=role, model=model, schema=schema, fallback=fallback)


def install_depth() -> int:
    """How many override_server_args installs are open."""
    return len(process.installs)


def _forget_installs(keep: int = 0) -> None:
    """Drop open installs above depth `keep` (the pytest plugin's leak recovery)."""
    del process.installs[keep:]


__all__ = ["ServerArgsOverride", "install_depth", "override_server_args"]
