"""Turn raw per-field values into a validated record of a schema, collecting every problem first.

Used by loading (files, env, CLI) and by the runtime for post-publish overrides, so a
value from HTTP is held to exactly the same rules as one from the command line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sgconf.convert import ConversionError, describe_type, structure
from sgconf.declarations import schema_of
from sgconf.errors import BadArgument, ConfigError, Problem
from sgconf.fieldinfo import FieldInfo
from sgconf.fields import REQUIRED
from sgconf.record import record_of, record_to_dict
from sgconf.rules import check_rules
from sgconf.suggest import did_you_mean

if TYPE_CHECKING:
    import cattrs

    from sgconf.declarations import Declarations


def shown(info: FieldInfo, value: Any) -> str:
    """How a given value appears in messages: its repr, secrets redacted."""
    return repr(info.shown(value))


def conversion_message(info: FieldInfo, raw: Any, exc: ConversionError) -> str:
    """Why `raw` does not fit `info`, then `got <value>`: the one rendering of a failed conversion.

    A conversion message may quote the value (`item 'key': ...`, a key that is not a
    string, a parser's complaint). For a value `info.shown` redacts it says only what
    the field and its failing item expect (`expected a JSON object or null (an item is
    not an integer), got '***'`): no key, no item, no detail of a secret.
    """
    if not info.hides(raw):
        return f"{exc}, got {shown(info, raw)}"
    item = f" (an item is not {exc.item})" if exc.item else ""
    return f"expected {describe_type(info.type)}{item}, got {shown(info, raw)}"


def convert_value(
    info: FieldInfo, raw: Any, source: str | None, converter: cattrs.Converter | None = None
) -> tuple[Any, Problem | None]:
    """One field's structured and checked value, or the problem that stops it (an override converts one at a time)."""
    try:
        value = structure(raw, info, converter)
    except ConversionError as exc:
        return None, Problem(info.path, conversion_message(info, raw, exc), source)
    for check in info.setting.checks:
        try:
            check(value)
        except ValueError as exc:  # FieldValueError, or a plain ValueError from a check of the schema
            return None, Problem(info.path, f"{exc}, got {shown(info, value)}", source)
    return value, None


def convert_fields(
    raw: Mapping[str, Any], sources: Mapping[str, str] | None = None, *, schema: Declarations
) -> tuple[dict[str, Any], list[Problem]]:
    """Structure every given value with the schema's converter; unknown names become problems with a did-you-mean hint."""
    sources = sources or {}
    infos = schema._fields
    conv = schema.converter
    out: dict[str, Any] = {}
    problems: list[Problem] = []
    for name, value in raw.items():
        info = infos.get(name)
        if info is None:
            problems.append(
                Problem(f"$.{name}", f"unknown field '{name}'{did_you_mean(name, infos)}", sources.get(name))
            )
            continue
        converted, problem = convert_value(info, value, sources.get(name), conv)
        if problem is not None:
            problems.append(problem)
        else:
            out[name] = converted
    return out, problems


def missing_required(values: Mapping[str, Any], schema: Declarations) -> list[Problem]:
    """A problem for every required setting (declared `REQUIRED`) that no input set."""
    out = []
    for name, value in values.items():
        if value is REQUIRED:
            info = schema.field_info(name)
            msg = f"'{name}' is required and nothing set it -- pass {info.flag}, set {info.env_var}, or put it in a config file"
            out.append(Problem(info.path, msg))
    return out


def build_record(
    raw: Mapping[str, Any],
    sources: Mapping[str, str] | None = None,
    *,
    base: Any = None,
    schema: Declarations | None = None,
) -> Any:
    """Build a record of `schema` (default: the base's) from raw values on top of `base` (defaults when None).

    Raises one ConfigError listing every bad field and every violated cross-field rule,
    and TypeError when no schema is named or `base` belongs to another schema.
    """
    base_schema = schema_of(base) if base is not None else None
    if base is not None and base_schema is None:
        raise BadArgument(f"base must be a record of an sgconf schema, got {type(base).__name__}")
    if schema is None:
        if base_schema is None:
            raise BadArgument("build_record() needs schema= or a base record to say which schema to build")
        schema = base_schema
    elif base_schema is not None and base_schema is not schema:
        msg = f"base is a record of schema {base_schema.name!r}, not {schema.name!r} -- pass a base of the schema you build"
        raise BadArgument(msg)
    values, problems = convert_fields(raw, sources, schema=schema)
    merged = record_to_dict(base, schema) if base is not None else {n: i.default for n, i in schema.fields().items()}
    merged.update(values)
    problems.extend(missing_required(merged, schema))
    if not problems:
        problems.extend(check_rules(merged, sources, schema=schema))
    if problems:
        raise ConfigError(problems)
    return record_of(merged, schema)
