"""`RecordView`: the published config read like the record, one attribute per field, overrides applied.

Test authors coming from serving runtimes write `server_args.page_size`. The raw record
keeps the launch values only, and a context has no attribute per field, so the pytest
`server_args` fixture hands out this view instead: every attribute read goes through the
context (`ctx.value(name)`), so it is the resolved value with the overrides and scopes in
force at that moment, exactly what business code reads through the accessors. Derived
members of a namespace (`attn_tp_size`) read from the current bags the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sgconf.suggest import did_you_mean

if TYPE_CHECKING:
    from runtime.context import RuntimeContext


class RecordView:
    """Attribute access to every field of a published record, live; read-only."""

    __slots__ = ("_context",)

    def __init__(self, context: RuntimeContext) -> None:
        object.__setattr__(self, "_context", context)

    @property
    def context(self) -> RuntimeContext:
        """The context this view reads (overrides go through it)."""
        return self._context

    @property
    def record(self) -> Any:
        """The raw published record, launch values only (typed as the schema's record class)."""
        return self._context.record

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # private and dunder lookups (copy, pickle) are not fields
            raise AttributeError(name)
        ctx = self._context
        schema = ctx.schema
        if name in schema.fields():
            return ctx.value(name)
        found = _derived_member(ctx, name)
        if found is not _MISSING:
            return found
        hint = did_you_mean(name, schema.fields())
        msg = f"'{name}' is not a field of {type(ctx.record).__name__}{hint}"
        raise AttributeError(msg)

    def __setattr__(self, name: str, value: Any) -> None:
        msg = (
            f"server_args is read-only: cannot set '{name}' -- use @pytest.mark.server_args({name}=...), "
            f"sgconf_context.scoped({name}=...) or sgconf_context.override(source, {name}=...)"
        )
        raise AttributeError(msg)

    def __dir__(self) -> list[str]:
        return sorted({*self._context.schema.fields(), "context", "record"})

    def __repr__(self) -> str:
        ctx = self._context
        return f"<{type(ctx.record).__name__} view, role {ctx.role!r}, generation {ctx.generation}>"


_MISSING = object()


def _derived_member(ctx: RuntimeContext, name: str) -> Any:
    """A property of a namespace class (`attn_tp_size` on the parallel bag), read from the current bags."""
    snap = ctx.snapshot()
    schema = ctx.schema
    for path in schema.leaf_namespaces():
        if not isinstance(getattr(schema.namespace_class(path), name, None), property):
            continue
        bag: Any = snap
        for part in path.split("."):
            bag = getattr(bag, part)
        return getattr(bag, name)
    return _MISSING


__all__ = ["RecordView"]
