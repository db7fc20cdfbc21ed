"""The classes of bags: a declared namespace made frozen and slotted, a group's, and their redacted repr.

A bag class carries its path and the schema that declared it (`PATH_ATTR`,
`DECLARED_BY_ATTR`), which accessors and the runtime read to name it in errors.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from sgconf.fields import FieldSpec, setting_of
from sgconf.frozen import deep_freeze, may_hold_container
from sgconf.redaction import redact

# the attribute a namespace class carries: its path in the schema that declared it
PATH_ATTR = "__sgconf_path__"
# on a namespace class: the name of the schema that declared it (a typed accessor's error names it)
DECLARED_BY_ATTR = "__sgconf_declared_by__"


def _freezing_transformer(hints: Mapping[str, Any]) -> Callable[[type, list[attrs.Attribute]], list[attrs.Attribute]]:
    """An attrs field transformer that deep-freezes the fields whose type can hold a container."""

    def transform(cls: type, attributes: list[attrs.Attribute]) -> list[attrs.Attribute]:
        out = []
        for a in attributes:
            tp = hints.get(a.name, a.type)
            if a.converter is None and may_hold_container(tp):
                a = a.evolve(converter=deep_freeze)
            out.append(a)
        return out

    return transform


def bag_class(cls: type, *, bases: tuple[type, ...] = ()) -> type:
    """Make `cls` a frozen slotted attrs class whose container fields freeze their values."""
    if bases:
        ns = {k: v for k, v in vars(cls).items() if k not in ("__dict__", "__weakref__")}
        cls = type(cls.__name__, bases, ns)
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # an annotation that names something not importable: freeze every field
        hints = {}
    bag = attrs.frozen(slots=True, field_transformer=_freezing_transformer(hints))(cls)
    attrs.resolve_types(bag)  # type: ignore[type-var]
    return bag


def group_class(name: str, children: Mapping[str, str], path: str, declared_by: str) -> type:
    """The bag class of a group: one attribute per child namespace, nothing else."""
    cls = attrs.make_class(name, {attr: attrs.field() for attr in children}, frozen=True, slots=True)
    setattr(cls, PATH_ATTR, path)
    setattr(cls, DECLARED_BY_ATTR, declared_by)
    return cls


def redacted_bag_repr(self: Any) -> str:
    parts = []
    for a in attrs.fields(type(self)):
        value = getattr(self, a.name)
        decl: FieldSpec | None = setting_of(a)
        shown = repr(redact(value, decl is not None and decl.secret))
        parts.append(f"{a.name}={shown}")
    return f"{type(self).__name__}({', '.join(parts)})"


__all__ = ["DECLARED_BY_ATTR", "PATH_ATTR", "bag_class", "group_class", "redacted_bag_repr"]
