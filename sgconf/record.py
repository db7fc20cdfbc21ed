"""The flat raw record of a schema (`ServerArgs` for the serving one) and the projection to and from its bags.

The record is assembled from the namespace declarations when the schema freezes, so a
field is declared exactly once. Business code never reads it: it is the raw input, kept
for diagnostics and guarded by the read ratchet. Every record class knows its schema
(`sgconf.schema.schema_of(record)`), so the functions here work for a record of any schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from sgconf.declarations import assemble_record as assemble_record
from sgconf.declarations import schema_of
from sgconf.errors import BadArgument
from sgconf.twin import builder

if TYPE_CHECKING:
    from sgconf.declarations import Declarations


def _schema(record: Any) -> Declarations:
    found = schema_of(record)
    if found is None:
        msg = (
            f"{type(record).__name__} is not a record of any sgconf schema -- pass schema= to say which fields to read"
        )
        raise BadArgument(msg)
    return found  # type: ignore[no-any-return]


def record_to_dict(record: Any, schema: Declarations | None = None) -> dict[str, Any]:
    """Every field of a record as a flat dict; `schema` (default: the record's own) says which fields.

    Anything with the same attributes works when `schema` is given.
    """
    names = (schema or _schema(record)).field_names()
    return {name: getattr(record, name) for name in names}


def record_of(values: Mapping[str, Any], schema: Declarations) -> Any:
    """A record of `schema` from `{field: value}` naming every field, validated like `schema.record(**values)`.

    The values go in by position: matching N keyword arguments to N parameters is
    quadratic in CPython, which made building a record of a few thousand fields
    dominate a load.
    """
    cls = schema.record
    return cls(*[values[name] for name in schema._fields])


def build_bag(path: str, flat: Mapping[str, Any], schema: Declarations, *, validate: bool = True) -> Any:
    """Construct the bag at `path` of `schema` from flat values (groups recurse into their children).

    `validate=False` is for values that were validated already (a built record): the bag is
    built without running `__init__` (`sgconf.twin.builder`), which skips the validators
    for this one object only. attrs' process-wide switch is never touched, so a concurrent
    build elsewhere is validated as usual.
    """
    cls = schema.namespace_class(path)
    children = schema.group_children(path)
    if children:
        values = {attr: build_bag(child, flat, schema, validate=validate) for attr, child in children.items()}
    else:
        values = {a.name: flat[a.name] for a in attrs.fields(cls)}
    if validate:
        return cls(**values)
    return builder(cls)(*[values[a.name] for a in attrs.fields(cls)])


def to_bags(record: Any, schema: Declarations | None = None) -> dict[str, Any]:
    """Project a record into its top-level bags: `{"model": ModelConfig(...), ..., "exec": ExecConfig(...)}`.

    Bags are built without re-running validators: the record was validated when it was built.
    """
    schema = schema or _schema(record)
    flat = record_to_dict(record, schema)  # a record's values are frozen already: no converter needed either
    return {path: build_bag(path, flat, schema, validate=False) for path in schema.top_level_namespaces()}


def bags_to_flat(bags: Mapping[str, Any], schema: Declarations) -> dict[str, Any]:
    """Flatten top-level bags of `schema` back into `{field: value}`."""
    out: dict[str, Any] = {}
    groups = schema.group_children

    def walk(path: str, bag: Any) -> None:
        children = groups(path)
        if children:
            for attr, child in children.items():
                walk(child, getattr(bag, attr))
            return
        for a in attrs.fields(type(bag)):
            out[a.name] = getattr(bag, a.name)

    for path, bag in bags.items():
        walk(path, bag)
    return out
