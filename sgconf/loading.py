"""Loading: defaults < config file < prefixed env (`SGCONF_*`) < CLI flags, into one validated record.

Every layer is read first, then every value of every layer is converted by the one
converter, and only then is anything raised: one ConfigError lists every problem of
every layer, each with its `$.namespace.field` path and source. The record remembers
how it was built (`provenance_of(record)`), so a runtime handed a record later can
still explain its launch layers.
"""

from __future__ import annotations

import os
import types
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from sgconf.declarations import schema_of
from sgconf.errors import BadArgument, ConfigError, Problem
from sgconf.flags import config_parser, given_fields, typed_flags
from sgconf.provenance import Origin
from sgconf.record import record_of
from sgconf.rules import check_rules
from sgconf.sources import (
    LayerInput,
    SourceRequest,
    config_file_path,
    config_path_from_env,
    layer_sources,
)
from sgconf.validation import convert_fields, missing_required

if TYPE_CHECKING:
    from sgconf.declarations import Declarations

Provenance = Mapping[str, tuple[Origin, ...]]


@attrs.frozen(slots=True, repr=False, eq=False)
class Loaded:
    """A loaded record and where each field came from: `provenance[name]` is the chain, lowest first, winner last."""

    record: Any
    provenance: Provenance
    config_file: str | None = None

    def chain(self, name: str, resolved: Any = None) -> tuple[Origin, ...]:
        """The provenance chain of `name`, plus the resolution decision when `resolved` (a Resolved) made one.

        Raises UnknownFieldError (with a suggestion) for an undeclared name.
        """
        return explain(self.record, name, resolved, provenance=self.provenance)

    def winner(self, name: str) -> Origin:
        """The layer whose value the record holds for `name`."""
        return self.chain(name)[-1]

    def __repr__(self) -> str:
        # The record's repr redacts secrets; the provenance is summarised, not dumped.
        set_by = sum(1 for chain in self.provenance.values() if len(chain) > 1)
        return f"Loaded(record={self.record!r}, config_file={self.config_file!r}, fields_set={set_by})"


def load(
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    config_file: str | os.PathLike[str] | None = None,
    *,
    schema: Declarations,
) -> Loaded:
    """Load a record of `schema` from defaults, a config file, env vars and CLI flags.

    `argv` holds field flags and `--config FILE` (None: no CLI layer; sys.argv is never
    read implicitly). `env` defaults to `os.environ`; only variables with the schema's
    prefix (`SGCONF_`) count. The config file is, in order, `--config` in argv,
    `config_file`, then the schema's config variable (`SGCONF_CONFIG`).
    Raises ConfigError listing every problem of every layer.
    """
    given: dict[str, Any] = {}
    typed: dict[str, str] = {}
    problems: list[Problem] = []
    if argv is not None:
        parser = _argv_parser(schema)
        ns, extra = parser.parse_known_args(list(argv))
        if extra:
            problems.extend(parser._unknown(extra))
        given = given_fields(ns, schema)
        typed = typed_flags(ns)
        config_file = ns.config or config_file
    return load_layers(given, env=env, config_file=config_file, problems=problems, schema=schema, typed=typed)


def _argv_parser(schema: Declarations) -> Any:
    # Building ~70 flags dominates a load; parsing leaves the parser unchanged, so a frozen schema keeps one.
    schema.freeze()
    parser = schema._cache.get("argv_parser")
    if parser is None:
        parser = schema._cache["argv_parser"] = config_parser(schema.name, schema=schema)
    return parser


def load_layers(
    cli: Mapping[str, Any],
    *,
    env: Mapping[str, str] | None = None,
    config_file: str | os.PathLike[str] | None = None,
    problems: Sequence[Problem] = (),
    schema: Declarations,
    typed: Mapping[str, str] | None = None,
) -> Loaded:
    """Load from already-parsed CLI values (`{field: raw}`); `problems` are carried into the error.

    `typed` is the spelling each value was given in (`flags.typed_flags`), for provenance.
    """
    env = os.environ if env is None else env
    path = config_file if config_file is not None else config_path_from_env(env, schema)
    file_text = str(config_file_path(path)) if path is not None and str(path) != "" else None
    request = SourceRequest(schema, env, path, cli, typed)
    layers: list[LayerInput] = [source.read(request) for source in schema.sources]

    found = list(problems)
    converted: list[tuple[LayerInput, dict[str, Any]]] = []
    for layer in layers:
        values, bad = convert_fields(layer.values, layer.sources(), schema=schema)
        found.extend(layer.problems)
        found.extend(bad)
        converted.append((layer, values))

    infos = schema.fields()
    merged = {name: info.default for name, info in infos.items()}
    for _, values in converted:
        merged.update(values)
    found.extend(missing_required(merged, schema))
    if not found:
        # rules only judge a complete, converted record: a failed field would be judged on a stale value
        found.extend(check_rules(merged, layer_sources(layers), schema=schema))
    if found:
        raise ConfigError(found)
    record = record_of(merged, schema)
    origins = [(name, layer.origin(name, value)) for layer, values in converted for name, value in values.items()]
    provenance = attach_provenance(record, schema, origins)
    return Loaded(record, provenance, file_text)


def attach_provenance(record: Any, schema: Declarations, origins: Sequence[tuple[str, Origin]]) -> Provenance:
    """Give a freshly built record its provenance: each field's default, then `(field, origin)` pairs in precedence order.

    The one place a record gets its provenance (loading, and publishing an adopted
    instance); set once, before anyone sees the record.
    """
    chains: dict[str, tuple[Origin, ...]] = dict(_default_chains(schema))  # shared by every record: made once
    for name, origin in origins:
        chains[name] = (*chains[name], origin)
    provenance = types.MappingProxyType(chains)
    object.__setattr__(record, "_sgconf_provenance", provenance)  # frozen: set once, before anyone sees it
    return provenance


def _default_chains(schema: Declarations) -> Mapping[str, tuple[Origin, ...]]:
    """Field -> `(its default's Origin,)`, built once per frozen schema: the chain of every field no layer set."""
    found = schema._cache.get("default_chains") if schema.frozen else None
    if found is None:
        found = {
            name: (Origin("default", "defaults", info.default, secret=info.setting.secret),)
            for name, info in schema.fields().items()
        }
        if schema.frozen:
            schema._cache["default_chains"] = found
    return found  # type: ignore[no-any-return]


def explain(
    record: Any, name: str, resolved: Any = None, *, provenance: Provenance | None = None
) -> tuple[Origin, ...]:
    """The launch chain of `name` for `record` (defaults only when unknown), then resolution's decision.

    Raises UnknownFieldError for an undeclared name.
    """
    schema = schema_of(record)
    if schema is None:
        raise BadArgument(f"explain() takes a record of an sgconf schema, got {type(record).__name__}")
    info = schema.field_info(name)
    known = provenance if provenance is not None else provenance_of(record)
    if known is not None:
        chain = list(known[name])
    else:
        chain = [Origin("default", "defaults", info.default, secret=info.setting.secret)]
        value = getattr(record, name)
        if value != info.default:
            chain.append(Origin("record", "given", value, secret=info.setting.secret))
    decision = resolved.decision_for(name) if resolved is not None else None
    if decision is not None:
        chain.append(
            Origin("resolution", f"{decision.step} ({decision.reason})", decision.value, secret=info.setting.secret)
        )
    return tuple(chain)


def provenance_of(record: Any) -> Provenance | None:
    """The provenance of a record built by `load()`; None for a record built any other way."""
    return getattr(record, "_sgconf_provenance", None)
