"""The flat record class a schema assembles when it freezes: its fields, its redacted repr, how it pickles.

Every schema's record class is made at freeze, so it cannot be found by its qualified
name: a pickle names the schema's import location and the values, and is rebuilt there.
The record knows its schema (`schema_of`), so everything downstream asks the record.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import attrs

from sgconf.errors import DeclarationError
from sgconf.fields import META_KEY, _AttrsAdapter
from sgconf.frozen import deep_freeze, may_hold_container

# the attribute a schema's record class (and an adopted dataclass) carries to find its schema
SCHEMA_ATTR = "__sgconf_schema__"


def schema_of(obj: Any) -> Any:
    """The schema whose record (or adopted dataclass) `obj` is an instance of; None otherwise."""
    found = getattr(type(obj), SCHEMA_ATTR, None)
    return found if callable(getattr(found, "field_info", None)) else None


def assemble_record(schema: Any) -> type:
    """Build the frozen, slotted record class holding every field of `schema`, flat."""
    attributes: dict[str, Any] = {}
    for info in schema.fields().values():
        validator = _AttrsAdapter(info.setting.checks) if info.setting.checks else None
        converter = deep_freeze if may_hold_container(info.type) else None
        attributes[info.name] = attrs.field(
            default=info.default,
            validator=validator,
            converter=converter,
            metadata={META_KEY: info.setting},
            type=info.type,
        )
    name = schema.record_name
    cls = attrs.make_class(name, attributes, frozen=True, slots=True, weakref_slot=True, repr=False)
    cls.__repr__ = _redacted_record_repr  # type: ignore[method-assign,assignment]
    # Private slots, outside the attrs fields (so not in eq, hash or evolve), where load() keeps
    # the provenance and resolve_once() its result: both live and die with the record, so no
    # global table can leak or go stale, and equal records built differently keep their own.
    record = type(name, (cls,), {"__slots__": _PRIVATE_SLOTS})
    record.__qualname__ = name
    record.__module__ = "sgconf.record"
    record.__doc__ = f"The flat raw record of every field of schema {schema.name!r}; frozen. Read the bags, not this."
    record.__reduce__ = _reduce_record  # type: ignore[method-assign,assignment]
    setattr(record, SCHEMA_ATTR, schema)
    return record


_PRIVATE_SLOTS = ("_sgconf_provenance", "_sgconf_resolution")


def _locate(schema: Any) -> tuple[str, str]:
    """Where `schema` can be imported from: a module holding one of its namespace classes and the name bound to it there."""
    for cls in schema._namespaces.values():
        module = sys.modules.get(cls.__module__)
        for attr, value in vars(module).items() if module is not None else ():
            if value is schema:
                return cls.__module__, attr
    msg = (
        f"cannot pickle a record of schema {schema.name!r}: no module that declares its namespaces binds the schema "
        "to a name -- assign the schema to a module-level variable where its namespaces are declared"
    )
    raise DeclarationError(msg)


def _reduce_record(self: Any) -> tuple[Any, ...]:
    # Every schema's record class is made at freeze, so it cannot be found by its qualified name:
    # a pickle names the schema's import location and the values, and is built again there.
    schema = schema_of(self)
    module, attr = _locate(schema)
    values = {name: getattr(self, name) for name in schema._fields}
    extras = {slot: getattr(self, slot) for slot in _PRIVATE_SLOTS if hasattr(self, slot)}
    if "_sgconf_provenance" in extras:
        extras["_sgconf_provenance"] = dict(extras["_sgconf_provenance"])  # a read-only proxy does not pickle
    return (_rebuild_record, (module, attr, values, extras))


def _rebuild_record(module: str, attr: str, values: dict[str, Any], extras: dict[str, Any]) -> Any:
    import importlib

    schema = getattr(importlib.import_module(module), attr)
    record = schema.record(**values)
    for slot, value in extras.items():
        object.__setattr__(record, slot, types.MappingProxyType(value) if slot == "_sgconf_provenance" else value)
    return record


def _redacted_record_repr(self: Any) -> str:
    schema = schema_of(self)
    assert schema is not None
    parts = []
    for name, info in schema.fields().items():
        value = getattr(self, name)
        if value != info.default:
            shown = repr(info.shown(value))
            parts.append(f"{name}={shown}")
    return f"{type(self).__name__}({', '.join(parts)})"


__all__ = ["SCHEMA_ATTR", "assemble_record", "schema_of"]
