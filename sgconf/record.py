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


def build_bag(path: str, flat: Mapping[str, Any]) -> Any:
    """Construct the bag at `path` from flat values (groups recurse into their children)."""
    cls = namespace_class(path)
    children = group_children(path)
    if children:
        return cls(**{attr: build_bag(child, flat) for attr, child in children.items()})
    return cls(**{a.name: flat[a.name] for a in attrs.fields(cls)})


def to_bags(record: Any) -> dict[str, Any]:
    """Project a record into its top-level bags: `{"model": ModelConfig(...), ..., "exec": ExecConfig(...)}`.

    Bags are built without re-running validators: the record was validated when it was built.
    """
    flat = record_to_dict(record)
    with _validators_off():
        return {path: build_bag(path, flat) for path in top_level_namespaces()}


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


class _validators_off:
    """Skip attrs validators while projecting already-validated values (restores the prior setting)."""

    def __enter__(self) -> None:
        self._was = attrs.validators.get_disabled()
        attrs.validators.set_disabled(True)

    def __exit__(self, *exc: object) -> None:
        attrs.validators.set_disabled(self._was)
