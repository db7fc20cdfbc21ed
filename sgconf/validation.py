"""Turn raw per-field values into a validated `ServerArgs`, collecting every problem first.

Used by loading (files, env, CLI) and by the runtime for post-publish overrides, so a
value from HTTP is held to exactly the same rules as one from the command line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sgconf.convert import ConversionError, structure
from sgconf.declarations import schema_of
from sgconf.errors import ConfigError, Problem
from sgconf.fields import REQUIRED, FieldValueError
from sgconf.record import record_to_dict
from sgconf.registry import FieldInfo, serving
from sgconf.rules import check_rules
from sgconf.suggest import did_you_mean

if TYPE_CHECKING:
    import cattrs

    from sgconf.schema import Schema


def shown(info: FieldInfo, value: Any) -> str:
    """How a given value appears in messages: secrets are redacted."""
    if info.spec.secret and value is not None:
        return "'***'"
    return repr(value)


def _convert(
    info: FieldInfo, raw: Any, source: str | None, converter: cattrs.Converter | None = None
) -> tuple[Any, Problem | None]:
    """The structured value, or the problem that stops it (structured once: this runs per override)."""
    try:
        value = structure(raw, info, converter)
    except ConversionError as exc:
        return None, Problem(info.path, f"{exc}, got {shown(info, raw)}", source)
    for check in info.spec.checks:
        try:
            check(value)
        except FieldValueError as exc:
            return None, Problem(info.path, f"{exc}, got {shown(info, value)}", source)
    return value, None


def convert_fields(
    raw: Mapping[str, Any], sources: Mapping[str, str] | None = None, *, schema: Schema | None = None
) -> tuple[dict[str, Any], list[Problem]]:
    """Structure every given value with the schema's converter; unknown names become problems with a did-you-mean hint."""
    sources = sources or {}
    schema = schema or serving()
    infos = schema._fields
    conv = schema.converter
    out: dict[str, Any] = {}
    problems: list[Problem] = []
    for name, value in raw.items():
        info = infos.get(name)
        if info is None:
            problems.append(Problem(f"$.{name}", f"unknown field '{name}'{did_you_mean(name, infos)}", sources.get(name)))
            continue
        converted, problem = _convert(info, value, sources.get(name), conv)
        if problem is not None:
            problems.append(problem)
        else:
            out[name] = converted
    return out, problems


def missing_required(values: Mapping[str, Any], schema: Schema) -> list[Problem]:
    """A problem for every required setting (declared `REQUIRED`) that no input set."""
    out = []
    for name, value in values.items():
        if value is REQUIRED:
            info = schema.field_info(name)
            msg = f"'{name}' is required and nothing set it -- pass {info.flag}, set {info.env_var}, or put it in a config file"
            out.append(Problem(info.path, msg))
    return out


def build_record(
    raw: Mapping[str, Any], sources: Mapping[str, str] | None = None, *, base: Any = None, schema: Schema | None = None
) -> Any:
    """Build a record of `schema` (the base's, else the serving one) from raw values on top of `base` (defaults when None).

    Raises one ConfigError listing every bad field and every violated cross-field rule.
    """
    schema = schema or (schema_of(base) if base is not None else None) or serving()
    values, problems = convert_fields(raw, sources, schema=schema)
    merged = record_to_dict(base, schema) if base is not None else {n: i.default for n, i in schema.fields().items()}
    merged.update(values)
    problems.extend(missing_required(merged, schema))
    if not problems:
        problems.extend(check_rules(merged, sources, schema=schema))
    if problems:
        raise ConfigError(problems)
    return schema.record(**merged)
