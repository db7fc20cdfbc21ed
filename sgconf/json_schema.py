"""JSON Schema (draft 2020-12) of every declared field, nested by namespace like the config file.

The same shape validates a nested config file (flat files are not described) and the output of
`sgconf show --format json`; editors can use it for completion of config files.
"""

from __future__ import annotations

import typing
from typing import TYPE_CHECKING, Any

from sgconf.convert import _strip_optional, scalar_union
from sgconf.dump import plain
from sgconf.durations import FORMAT
from sgconf.fieldinfo import FieldInfo
from sgconf.fields import REQUIRED, _Interval
from sgconf.kinds import ClassKind, class_kind

if TYPE_CHECKING:
    from sgconf.declarations import Declarations

DIALECT = "https://json-schema.org/draft/2020-12/schema"

_JSON_TYPES = {
    int: "integer",
    float: "number",
    bool: "boolean",
    str: "string",
    dict: "object",
    list: "array",
    tuple: "array",
    set: "array",
    frozenset: "array",
}


# the JSON types of the classes written by their own rule (an Enum is its choices), and their x-format
_CLASS_TYPES: dict[ClassKind | None, tuple[str, ...]] = {
    ClassKind.DURATION: ("string", "number"),
    ClassKind.PATH: ("string",),
    ClassKind.RECORD: ("object",),
}
_CLASS_FORMATS: dict[ClassKind | None, str] = {ClassKind.DURATION: FORMAT, ClassKind.PATH: "a file system path"}


def _json_type(inner: Any, info: FieldInfo) -> tuple[str, ...] | None:
    """The JSON types a field's value is written as: a float that accepts inf and nan is also their text."""
    if inner is float and info.setting.nonfinite:
        return ("number", "string")
    found = _CLASS_TYPES.get(class_kind(inner))
    if found is not None:
        return found
    members = scalar_union(inner)
    if members is not None:
        return tuple(dict.fromkeys(_JSON_TYPES[m] for m in members))
    name = _JSON_TYPES.get(typing.get_origin(inner) or inner)
    return None if name is None else (name,)


def field_schema(info: FieldInfo) -> dict[str, Any]:
    """The schema of one field: type (with "null" when optional), enum, bounds, description, default."""
    optional = _strip_optional(info.type) is not info.type
    out: dict[str, Any] = {"description": info.setting.help}
    choices = info.choices
    if choices is not None:
        out["enum"] = [*choices, None] if optional else list(choices)
    if info.setting.plugin is not None:
        out["x-plugin"] = info.setting.plugin.kind  # the enum lists what is registered when this was written
    inner = _strip_optional(info.type)
    if choices is None or info.setting.plugin is not None:
        name = _json_type(inner, info)
        if name is not None:
            out["type"] = [*name, "null"] if optional else (name[0] if len(name) == 1 else list(name))
    x_format = _CLASS_FORMATS.get(class_kind(inner))
    if x_format is not None:
        out["x-format"] = x_format
    for check in info.setting.checks:
        if isinstance(check, _Interval):
            if check.low is not None:
                out["exclusiveMinimum" if check.low_open else "minimum"] = check.low
            if check.high is not None:
                out["exclusiveMaximum" if check.high_open else "maximum"] = check.high
    if info.default is not REQUIRED and not info.hides(info.default):
        out["default"] = plain(info.default)  # a secret's set default is redacted when shown: left out here
    if info.setting.secret:
        out["writeOnly"] = True  # dumps redact it
    out["x-flag"] = info.flag
    out["x-env"] = info.env_var
    if info.setting.hot:
        out["x-hot"] = True
    out["x-apply"] = info.setting.apply  # step | drain | restart: how a change after publish applies
    return out


def _namespace_schema(path: str, schema: Declarations) -> dict[str, Any]:
    children = schema.group_children(path)
    props = (
        {attr: _namespace_schema(child, schema) for attr, child in children.items()}
        if children
        else {info.name: field_schema(info) for info in schema.iter_fields_of(path)}
    )
    out: dict[str, Any] = {"type": "object", "title": path, "properties": props, "additionalProperties": False}
    required = [info.name for info in schema.iter_fields_of(path) if info.default is REQUIRED] if not children else []
    if required:
        out["required"] = required
    return out


def config_schema(schema: Declarations) -> dict[str, Any]:
    """The whole JSON Schema of `schema`: one object per top-level namespace."""
    return {
        "$schema": DIALECT,
        "title": f"{schema.name} configuration",
        "description": schema.description,
        "type": "object",
        "properties": {path: _namespace_schema(path, schema) for path in schema.top_level_namespaces()},
        "additionalProperties": False,
    }
