"""Operator input (`field=value` words of `sgconf fleet set`) to the desired fields of a version.

Each value is converted by the field's declared type here, with the converter every
other source uses, so the store holds typed JSON (`0.5`, not `"0.5"`) and a typo is
refused before anything is written. Each server checks the version again against
its own schema and capacity when it applies it; a field that can never change while
a server runs (apply mode `restart`) is refused here already, with the launch flag.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engine.fleet import secrets
from sgconf.convert import ConversionError, structure
from sgconf.dump import plain
from sgconf.errors import ConfigError, Problem, UnknownFieldError
from sgconf.redaction import REDACTED
from sgconf.serving import field_info

# What a storage attach takes (`ServingBackend.attach`, as `engine.http.bodies.attach_fields`
# builds it): these go through the attach and detach path, together, not as an override.
ATTACH_PATH_FIELDS = (
    "hicache_storage_backend",
    "hicache_storage_backend_extra_config",
    "hicache_storage_prefetch_policy",
    "hicache_write_policy",
)
SOURCE = "from sgconf fleet set"


def parse_assignments(words: Sequence[str]) -> dict[str, Any]:
    """`{"field": typed JSON value}` from `field=value` words; raises ConfigError listing every bad word."""
    out: dict[str, Any] = {}
    problems: list[Problem] = []
    for word in words:
        name, sep, text = word.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not name:
            problems.append(Problem("$", f"expected FIELD=VALUE, got {word!r} -- e.g. schedule_policy=lpm", SOURCE))
            continue
        try:
            info = field_info(name)
        except UnknownFieldError as exc:
            problems.extend(exc.problems)
            continue
        ref = secrets.parse_ref(text)
        if info.setting.secret and ref is None:
            msg = (
                f"'{name}' is a secret and the fleet store would keep it in clear (got {REDACTED!r})"
                " -- give @env:VAR or @file:PATH, read by each server when it applies the version"
            )
            problems.append(Problem(info.path, msg, SOURCE))
            continue
        if info.setting.apply == "restart" and name not in ATTACH_PATH_FIELDS:
            msg = (
                f"'{name}' cannot change while a server runs (apply mode restart)"
                f" -- restart the servers with {info.flag}"
            )
            problems.append(Problem(info.path, msg, SOURCE))
            continue
        if ref is not None:
            out[name] = ref
            continue
        try:
            out[name] = plain(structure(text, info))
        except ConversionError as exc:
            problems.append(Problem(info.path, f"'{name}': {exc} (got {text!r})", SOURCE))
    if problems:
        raise ConfigError(problems, header="fleet change refused, nothing written")
    return out


def merged(current: Mapping[str, Any], sets: Mapping[str, Any], unset: Sequence[str]) -> dict[str, Any]:
    """The fields of the next version: `current`, then `sets`, less `unset` (which go back to launch values)."""
    out = {**current, **sets}
    problems: list[Problem] = []
    for name in unset:
        name = name.replace("-", "_")
        if name not in out:
            held = ", ".join(sorted(out)) or "none"
            problems.append(Problem(f"$.{name}", f"'{name}' is not in the desired config (it holds: {held})", SOURCE))
        out.pop(name, None)
    problems.extend(storage_problems(out))
    if problems:
        raise ConfigError(problems, header="fleet change refused, nothing written")
    return out


def storage_problems(fields: Mapping[str, Any]) -> list[Problem]:
    """The storage settings ride on an attach: they need `hicache_storage_backend` set alongside."""
    others = [n for n in ATTACH_PATH_FIELDS[1:] if n in fields]
    if not others or fields.get("hicache_storage_backend") is not None:
        return []
    names = ", ".join(others)
    return [
        Problem(
            field_info(n).path,
            f"'{n}' is applied by a storage attach -- set hicache_storage_backend with {names}",
            SOURCE,
        )
        for n in others
    ]


def describe(fields: Mapping[str, Any]) -> str:
    """`schedule_policy='lpm', api_key=@env:KEY`: a version's fields as one line (references, never secrets)."""
    if not fields:
        return "no overrides (every server at its launch config)"
    return ", ".join(f"{n}={secrets.shown(v) if secrets.is_ref(v) else repr(v)}" for n, v in sorted(fields.items()))


__all__ = ["ATTACH_PATH_FIELDS", "describe", "merged", "parse_assignments", "storage_problems"]
