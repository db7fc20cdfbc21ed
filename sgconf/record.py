"""`ServerArgs`, the flat raw record, and the projection between it and the namespace bags.

The record is assembled from the namespace declarations, so a field is declared exactly
once. Business code never reads it: it is the raw input, kept for diagnostics and
guarded by the read ratchet.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

import sgconf.namespaces  # noqa: F401  -- registers the namespaces before the record is assembled
from sgconf.fields import META_KEY, _AttrsAdapter
from sgconf.registry import (
    fields,
    group_children,
    namespace_class,
    top_level_namespaces,
)


def _assemble() -> type:
    attributes: dict[str, Any] = {}
    for info in fields().values():
        validator = _AttrsAdapter(info.spec.checks) if info.spec.checks else None
        attributes[info.name] = attrs.field(
            default=info.default, validator=validator, metadata={META_KEY: info.spec}, type=info.type
        )
    cls = attrs.make_class(
        "ServerArgs",
        attributes,
        frozen=True,
        slots=True,
        weakref_slot=True,
        repr=False,
    )
    cls.__repr__ = _redacted_repr  # type: ignore[method-assign,assignment]
    # Private slots, outside the attrs fields (so not in eq, hash or evolve), where load() keeps
    # the provenance and resolve_once() its result: both live and die with the record, so no
    # global table can leak or go stale, and equal records built differently keep their own.
    record = type("ServerArgs", (cls,), {"__slots__": ("_sgconf_provenance", "_sgconf_resolution")})
    record.__module__ = __name__
    record.__qualname__ = "ServerArgs"
    record.__doc__ = "The flat raw record of every declared field; frozen. Read the bags, not this."
    return record


def _redacted_repr(self: Any) -> str:
    parts = []
    for name, info in fields().items():
        value = getattr(self, name)
        if value != info.default:
            shown = "'***'" if info.spec.secret and value is not None else repr(value)
            parts.append(f"{name}={shown}")
    return f"ServerArgs({', '.join(parts)})"


ServerArgs: Any = _assemble()


def record_to_dict(record: Any) -> dict[str, Any]:
    """Every field of a record (or anything with the same attributes) as a flat dict."""
    return {name: getattr(record, name) for name in fields()}


def build_bag(path: str, flat: Mapping[str, Any], *, validate: bool = True) -> Any:
    """Construct the bag at `path` from flat values (groups recurse into their children).

    `validate=False` is for values that were validated already (a built record): the bag is
    filled slot by slot without running `__init__`, which skips the validators for this
    one object only. attrs' process-wide switch is never touched, so a concurrent build
    elsewhere is validated as usual.
    """
    cls = namespace_class(path)
    children = group_children(path)
    if children:
        values = {attr: build_bag(child, flat, validate=validate) for attr, child in children.items()}
    else:
        values = {a.name: flat[a.name] for a in attrs.fields(cls)}
    if validate:
        return cls(**values)
    return _prevalidated(cls, values)


def _prevalidated(cls: type, values: Mapping[str, Any]) -> Any:
    bag: Any = object.__new__(cls)
    for name, value in values.items():
        object.__setattr__(bag, name, value)  # how attrs' own frozen __init__ fills a slot
    return bag


def to_bags(record: Any) -> dict[str, Any]:
    """Project a record into its top-level bags: `{"model": ModelConfig(...), ..., "exec": ExecConfig(...)}`.

    Bags are built without re-running validators: the record was validated when it was built.
    """
    flat = record_to_dict(record)
    return {path: build_bag(path, flat, validate=False) for path in top_level_namespaces()}


def bags_to_flat(bags: Mapping[str, Any]) -> dict[str, Any]:
    """Flatten top-level bags back into `{field: value}`."""
    out: dict[str, Any] = {}

    def walk(path: str, bag: Any) -> None:
        children = group_children(path)
        if children:
            for attr, child in children.items():
                walk(child, getattr(bag, attr))
            return
        for a in attrs.fields(type(bag)):
            out[a.name] = getattr(bag, a.name)

    for path, bag in bags.items():
        walk(path, bag)
    return out
