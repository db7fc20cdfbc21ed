"""What the project's field source tells the ratchet: field names, hot fields, accessors, record names.

`field_source` in `ratchet.toml` names either a schema object (`"myrt.config:SCHEMA"`)
or a callable returning field names (`"myrt.config:field_names"`, also a bound method
such as `SCHEMA.field_names`). A schema answers every question at once; a plain callable
answers only the field list, and the other keys (`hot_field_source`, `accessor_source`)
fill in the rest.

The ratchet imports nothing of sgconf: a schema is recognised by duck typing (it has
`field_names()` and `accessor_of()`), so any framework's declarations can feed it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs


@attrs.frozen(slots=True)
class SourceFacts:
    """Everything the field source gave; None where it does not know (a plain callable)."""

    names: tuple[str, ...]
    hot: frozenset[str] | None = None
    accessor: Callable[[str], Any] | None = None
    accessor_module: str | None = None
    #: class names whose instances are the record: the schema's record class, an adopted class
    record_types: tuple[str, ...] = ()
    #: the name the project's code calls the schema by (`SCHEMA.build(...)`, `SCHEMA.load(...)`)
    schema_name: str | None = None


def is_schema(obj: Any) -> bool:
    return callable(getattr(obj, "field_names", None)) and callable(getattr(obj, "accessor_of", None))


def facts_of(obj: Any, spec: str) -> SourceFacts:
    """Read `obj` (what `spec` names) as a schema, a schema's bound method, or a names callable.

    Raises whatever the project's code raises; the caller turns it into one config error.
    """
    owner = getattr(obj, "__self__", None)
    if not is_schema(obj) and is_schema(owner) and getattr(obj, "__name__", "") == "field_names":
        obj = owner  # `SCHEMA.field_names`: the schema itself knows more than its names
        spec = spec.rpartition(".")[0]
    if is_schema(obj):
        return _schema_facts(obj, spec)
    return SourceFacts(tuple(str(n) for n in obj()))


def _is_hot(info: Any) -> bool:
    """A field's `hot` flag, as sgconf's FieldInfo carries it (`info.setting.hot`)."""
    try:
        return bool(info.setting.hot)
    except AttributeError:
        return False


def _schema_facts(schema: Any, spec: str) -> SourceFacts:
    names = tuple(str(n) for n in schema.field_names())
    hot: frozenset[str] | None = None
    fields = getattr(schema, "fields", None)
    if callable(fields):
        hot = frozenset(n for n, info in fields().items() if _is_hot(info))
    types: list[str] = []
    for candidate in (
        getattr(schema, "record_name", None),
        getattr(getattr(schema, "adopted", None), "__name__", None),
    ):
        if isinstance(candidate, str) and candidate and candidate not in types:
            types.append(candidate)
    module = getattr(schema, "accessor_module", None)
    attr = spec.partition(":")[2]
    return SourceFacts(
        names,
        hot=hot,
        accessor=schema.accessor_of,
        accessor_module=module if isinstance(module, str) and module else None,
        record_types=tuple(types),
        schema_name=attr.rpartition(".")[2] or None,
    )
