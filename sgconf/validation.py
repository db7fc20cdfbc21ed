"""Turn raw per-field values into a validated `ServerArgs`, collecting every problem first.

Used by loading (files, env, CLI) and by the runtime for post-publish overrides, so a
value from HTTP is held to exactly the same rules as one from the command line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sgconf.convert import ConversionError, structure
from sgconf.errors import ConfigError, Problem
from sgconf.fields import FieldValueError
from sgconf.record import ServerArgs, record_to_dict
from sgconf.registry import FieldInfo, fields
from sgconf.rules import check_rules
from sgconf.suggest import did_you_mean


def shown(info: FieldInfo, value: Any) -> str:
    """How a given value appears in messages: secrets are redacted."""
    if info.spec.secret and value is not None:
        return "'***'"
    return repr(value)


def _convert(info: FieldInfo, raw: Any, source: str | None) -> tuple[Any, Problem | None]:
    """The structured value, or the problem that stops it (structured once: this runs per override)."""
    try:
        value = structure(raw, info)
    except ConversionError as exc:
        return None, Problem(info.path, f"{exc}, got {shown(info, raw)}", source)
    for check in info.spec.checks:
        try:
            check(value)
        except FieldValueError as exc:
            return None, Problem(info.path, f"{exc}, got {shown(info, value)}", source)
    return value, None


def convert_fields(raw: Mapping[str, Any], sources: Mapping[str, str] | None = None) -> tuple[dict[str, Any], list[Problem]]:
    """Structure every given value; unknown names become problems with a did-you-mean hint."""
    sources = sources or {}
    infos = fields()
    out: dict[str, Any] = {}
    problems: list[Problem] = []
    for name, value in raw.items():
        info = infos.get(name)
        if info is None:
            problems.append(Problem(f"$.{name}", f"unknown field '{name}'{did_you_mean(name, infos)}", sources.get(name)))
            continue
        converted, problem = _convert(info, value, sources.get(name))
        if problem is not None:
            problems.append(problem)
        else:
            out[name] = converted
    return out, problems


def build_record(raw: Mapping[str, Any], sources: Mapping[str, str] | None = None, *, base: Any = None) -> Any:
    """Build a `ServerArgs` from raw values on top of `base` (defaults when None).

    Raises one ConfigError listing every bad field and every violated cross-field rule.
    """
    values, problems = convert_fields(raw, sources)
    merged = record_to_dict(base) if base is not None else {n: i.default for n, i in fields().items()}
    merged.update(values)
    if not problems:
        problems.extend(check_rules(merged, sources))
    if problems:
        raise ConfigError(problems)
    return ServerArgs(**merged)
