"""Settings whose type is itself a small record: a frozen attrs class or dataclass (`retry: Retry`).

Such a value is written as an object in a config file, as JSON on the command line, and
is held as an instance of the class. Only frozen classes are carried: the instance is
shared by every reader of a published bag, so a mutable one would let `bag.retry.tries = 9`
change the live config with no new generation. The container fields of an instance are
frozen too (a list becomes a tuple), by rebuilding it.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any

import attrs


@attrs.frozen(slots=True)
class SubField:
    """One field of a record-typed setting's class, as conversion and freezing need it."""

    name: str
    type: Any
    required: bool


def is_record_type(tp: Any) -> bool:
    """Whether `tp` is an attrs class or a dataclass (the class, not an instance)."""
    return isinstance(tp, type) and (attrs.has(tp) or dataclasses.is_dataclass(tp))


def is_frozen_record_type(tp: type) -> bool:
    """Whether instances of record class `tp` refuse assignment (attrs `frozen`, dataclass `frozen=True`)."""
    if attrs.has(tp):
        props = getattr(tp, "__attrs_props__", None)  # attrs >= 25.4 says so itself
        if props is not None:
            return bool(props.is_frozen)
        return getattr(tp.__setattr__, "__name__", "") == "_frozen_setattrs"
    params = getattr(tp, "__dataclass_params__", None)
    return bool(params is not None and params.frozen)


@functools.cache
def sub_fields(tp: type) -> tuple[SubField, ...]:
    """The init fields of record class `tp`, their annotations resolved (once per class)."""
    if attrs.has(tp):
        attrs.resolve_types(tp)
        return tuple(
            SubField(a.alias or a.name, a.type, a.default is attrs.NOTHING) for a in attrs.fields(tp) if a.init
        )
    hints = typing.get_type_hints(tp)
    return tuple(
        SubField(
            f.name,
            hints.get(f.name, Any),
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
        )
        for f in dataclasses.fields(tp)
        if f.init
    )


def values_of(value: Any) -> dict[str, Any]:
    """`{field: value}` of a record instance, by init name (what rebuilding it takes)."""
    kind = type(value)
    return {f.name: getattr(value, _attribute(kind, f.name)) for f in sub_fields(kind)}  # type: ignore[arg-type]


def _attribute(tp: type, init_name: str) -> str:
    if attrs.has(tp):
        for a in attrs.fields(tp):
            if (a.alias or a.name) == init_name:
                return a.name
    return init_name


def rebuilt(value: Any, fields: dict[str, Any]) -> Any:
    """A copy of record instance `value` with `fields` (by init name)."""
    return type(value)(**{**values_of(value), **fields})


__all__ = ["SubField", "is_frozen_record_type", "is_record_type", "rebuilt", "sub_fields", "values_of"]
