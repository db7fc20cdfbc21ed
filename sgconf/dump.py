"""Dumps of flat values: nested by namespace (`exec.kernel` under `exec`), secrets redacted, as data or TOML.

`nested()` is what `sgconf show --format json` prints and what the JSON Schema of
`sgconf.json_schema` describes; a runtime's `/server_info` can reuse it for its own values.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from sgconf.frozen import thaw

if TYPE_CHECKING:
    from sgconf.declarations import Declarations


# A JSON-able, mutable copy of a field value (tuples become lists, mappings become dicts): the one copy.
plain = thaw


def clipped_repr(value: Any, limit: int = 60) -> str:
    """`value`'s repr as a refusal quotes it: cut to `limit` characters, so a huge value never floods a message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type (null, boolean, number, string, array, object), for messages.

    A client sent JSON, not Python: a refusal that says "got NoneType" or "got dict"
    names a type it never wrote. Anything else (a value from Python) keeps its class name.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def redacted(name: str, value: Any, schema: Declarations) -> Any:
    """Field `name`'s value as it may be shown: redacted when the field is secret."""
    return schema.field_info(name).shown(value)


def nested(
    values: Mapping[str, Any], *, schema: Declarations, redact: bool = True, only: Iterable[str] | None = None
) -> dict[str, Any]:
    """`{"schedule": {"page_size": 1, ...}, "exec": {"kernel": {...}}, ...}` from flat values.

    `only` keeps just those fields (namespaces left empty are dropped); secrets are
    redacted unless `redact=False`.
    """
    keep = None if only is None else set(only)

    def table(path: str) -> dict[str, Any]:
        children = schema.group_children(path)
        if children:
            out = {attr: table(child) for attr, child in children.items()}
            return {k: v for k, v in out.items() if v or keep is None}
        out = {}
        for info in schema.iter_fields_of(path):
            if keep is not None and info.name not in keep:
                continue
            value = values[info.name]
            out[info.name] = plain(info.shown(value) if redact else value)
        return out

    tables = {path: table(path) for path in schema.top_level_namespaces()}
    return {k: v for k, v in tables.items() if v or keep is None}


def to_toml(data: Mapping[str, Any], *, schema: Declarations, header: str = "") -> str:
    """Render `nested()` output as TOML that `tomllib` reads back (and `--config` accepts).

    TOML has no null: None values are left out and listed in a comment instead, and a
    list or object holding a null is written as its JSON string, so loading the dump gives back
    an equal record.
    """
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    unset: list[str] = []
    body: list[str] = []
    _table(_namespace_tables(data, schema), (), body, unset)
    if unset:
        lines.append("# unset (None) values are omitted: " + ", ".join(unset))
    return "\n".join(lines + body).strip("\n") + "\n"


def _table(data: Mapping[str, Any], prefix: tuple[str, ...], out: list[str], unset: list[str]) -> None:
    scalars = [(k, v) for k, v in data.items() if not _is_table(v)]
    tables = [(k, v) for k, v in data.items() if _is_table(v)]
    if prefix and any(v is not None for _, v in scalars):
        out.append("")
        out.append("[" + ".".join(_key(p) for p in prefix) + "]")
    for key, value in scalars:
        if value is None:
            unset.append(".".join((*prefix, key)))
            continue
        if isinstance(value, (Mapping, list, tuple)) and _holds_none(value):
            # TOML has no null: a list or object with nulls inside travels as the JSON string the loader accepts
            out.append(f"{_key(key)} = {_string(json.dumps(plain(value), ensure_ascii=False))}")
            continue
        out.append(f"{_key(key)} = {_value(value)}")
    for key, value in tables:
        _table(value, (*prefix, key), out, unset)


def _holds_none(value: Any) -> bool:
    if isinstance(value, Mapping):
        value = value.values()
    elif not isinstance(value, (list, tuple)):
        return value is None
    return any(_holds_none(v) for v in value)


def _is_table(value: Any) -> bool:
    # A namespace nests as a [table]; a dict-valued field (backend extra config) is written inline.
    return isinstance(value, _Namespace)


class _Namespace(dict):  # type: ignore[type-arg]
    """Marks a dict as a namespace table (as opposed to a dict-valued field)."""


def _namespace_tables(data: Mapping[str, Any], schema: Declarations) -> _Namespace:
    top = set(schema.top_level_namespaces())

    def mark(path: str, table: Mapping[str, Any]) -> _Namespace:
        children = schema.group_children(path)
        return _Namespace({k: mark(children[k], v) if k in children else v for k, v in table.items()})

    return _Namespace({k: mark(k, v) if k in top else v for k, v in data.items()})


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _string(key)


def _string(text: str) -> str:
    # JSON string escapes are valid TOML basic-string escapes; DEL must be escaped in TOML too.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)  # `inf`, `-inf` and `nan` are TOML's spellings too
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, Mapping):
        items = [f"{_key(str(k))} = {_value(v)}" for k, v in value.items() if v is not None]
        return "{ " + ", ".join(items) + " }" if items else "{}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value if v is not None) + "]"
    return _string(str(value))
