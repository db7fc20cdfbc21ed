"""The built-in serving schema, one user of the framework like any other, and its names bound in one place.

`SERVING` is declared in `sgconf.serving.namespaces` (fields), `.rules` (cross-field
rules), `.steps` (resolution) and `.derived` (derived values); its shipped model configs
live in `.models`. The functions below are the framework's calls with `schema=SERVING`
filled in: the names users type (`sgconf.load`, `sgconf.build_record`, `sgconf.fields`,
the `sgconf` command) are these. Nothing else in the framework defaults to this schema.
"""

from __future__ import annotations

import types as _types
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sgconf import cli as _cli
from sgconf import dump as _dump
from sgconf import rules as _rules
from sgconf import validation as _validation
from sgconf.errors import Problem
from sgconf.fieldinfo import FieldInfo
from sgconf.json_schema import config_schema as _config_schema
from sgconf.loading import Loaded
from sgconf.serving.models import builtin_model_config, builtin_model_names, load_model_config
from sgconf.serving.namespaces import (
    SERVING,
    DeviceConfig,
    DisaggConfig,
    ExecConfig,
    GraphConfig,
    KernelConfig,
    MambaConfig,
    MemoryConfig,
    ModelConfig,
    ObservabilityConfig,
    ParallelConfig,
    ScheduleConfig,
    ServingConfig,
    SpecConfig,
)
from sgconf.serving.rules import RULES

ServerArgs = SERVING.record
# names imported here for the functions below, not part of what this binding offers
_NOT_EXPORTED = {
    "annotations",
    "Any",
    "Iterable",
    "Mapping",
    "Sequence",
    "Problem",
    "FieldInfo",
    "Loaded",
    "COMMAND_GROUP",
}
# the live set: a package adds its own switches (`RESERVED_ENV.add("SGCONF_MY_SWITCH")`)
RESERVED_ENV = SERVING.reserved_env
COMMAND_GROUP = _cli.COMMAND_GROUP


def load(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None, config_file: Any = None) -> Loaded:
    """Load a serving record from defaults, a config file, `SGCONF_*` env vars and CLI flags (`Schema.load`)."""
    return SERVING.load(argv, env, config_file)  # type: ignore[no-any-return]


def build_record(raw: Mapping[str, Any], sources: Mapping[str, str] | None = None, *, base: Any = None) -> Any:
    """A validated `ServerArgs` from raw values on top of `base` (defaults when None); raises ConfigError."""
    return _validation.build_record(raw, sources, base=base, schema=SERVING)


def convert_fields(
    raw: Mapping[str, Any], sources: Mapping[str, str] | None = None
) -> tuple[dict[str, Any], list[Problem]]:
    """Structure serving field values; the problems name each bad field."""
    return _validation.convert_fields(raw, sources, schema=SERVING)


def check_rules(values: Mapping[str, Any], sources: Mapping[str, str] | None = None, **kwargs: Any) -> list[Problem]:
    """The serving schema's cross-field rules over flat values; one Problem per violation."""
    return _rules.check_rules(values, sources, schema=SERVING, **kwargs)


def nested(values: Mapping[str, Any], *, redact: bool = True, only: Iterable[str] | None = None) -> dict[str, Any]:
    """Flat serving values nested by namespace, secrets redacted unless `redact=False`."""
    return _dump.nested(values, schema=SERVING, redact=redact, only=only)


def config_schema() -> dict[str, Any]:
    """The JSON Schema of every serving setting (what `sgconf schema` prints)."""
    return _config_schema(SERVING)


def fields() -> dict[str, FieldInfo]:
    """Every serving field by flat name, in declaration order (a fresh dict)."""
    return SERVING.fields()


def field_names() -> list[str]:
    """Every serving field name (the read ratchet's field source for this repository)."""
    return SERVING.field_names()


def field_info(name: str) -> FieldInfo:
    """One serving field; UnknownFieldError with a did-you-mean suggestion when there is none."""
    return SERVING.field_info(name)


def namespace_of(name: str) -> str:
    """The namespace path that declares serving field `name`, e.g. `"exec.kernel"`."""
    return SERVING.namespace_of(name)


def main(argv: Sequence[str] | None = None) -> int:
    """The `sgconf` console script: `show`, `schema`, and the commands of the `sgconf.commands` group."""
    return _cli.main(argv, schema=SERVING, command_group=COMMAND_GROUP)


# derived: every public name bound above (the facade `sgconf` re-exports exactly these)
__all__ = sorted(
    name
    for name, value in globals().items()
    if not name.startswith("_") and not isinstance(value, _types.ModuleType) and name not in _NOT_EXPORTED
)
