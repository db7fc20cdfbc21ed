"""Resolution: turn every `None`/`"auto"` into a named, recorded decision, once per record.

A schema's steps (typed `Step`s, each naming the fields it reads) run in order over a
working copy of the values. Each returns the decisions it took; each decision becomes
provenance `resolution:<step>`. Steps consult what the schema's `inputs` hook builds from
the values and the model config (the runtime's model, read by the schema's `model_reader`
when the caller passes none). A record is resolved at most once: a second call returns
the same `Resolved`, and a record whose resolution failed stays failed.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from typing import Any

import attrs

from sgconf.declarations import schema_of
from sgconf.errors import BadArgument, ConfigError, Problem, ResolutionError
from sgconf.loading import provenance_of
from sgconf.record import record_of, record_to_dict, to_bags
from sgconf.rules import check_rules


@attrs.frozen(slots=True)
class Decision:
    """One value resolution chose: which step, which field, what value, and why."""

    step: str
    field: str
    value: Any
    reason: str

    @property
    def source(self) -> str:
        return f"resolution:{self.step}"


@attrs.frozen(slots=True)
class Resolved:
    """A record and what resolution made of it; `values` is a ServerArgs with no `auto` left."""

    record: Any
    values: Any
    decisions: tuple[Decision, ...]
    model: Mapping[str, Any] | None = None

    def bags(self) -> dict[str, Any]:
        return to_bags(self.values, schema_of(self.values))

    def decision_for(self, field: str) -> Decision | None:
        for d in self.decisions:
            if d.field == field:
                return d
        return None


# Serializes first resolutions, so two threads resolving one record get one result.
_lock = threading.Lock()


def resolve_once(record: Any, model: Mapping[str, Any] | Any | None = None, *, require_model: bool = False) -> Resolved:
    """Resolve `record` (a ServerArgs) once; later calls return the same `Resolved`.

    `model` is an HF-style config dict (or an object with `to_config()`/`config`); when
    None, the schema's `model_reader` reads the one the record names if it can; with
    `require_model` one that cannot be read is a ConfigError, as for `plan` and `serve`.
    Raises ResolutionError when the resolved values break a rule; the failure is
    remembered so the same record cannot be resolved again. Raises ConfigError when the
    record was already resolved and `model` differs from the model used then.
    """
    if schema_of(record) is None:
        raise BadArgument(
            f"resolve_once() takes a record of a frozen sgconf schema (a ServerArgs), got {type(record).__name__}"
        )
    with _lock:
        result = getattr(record, "_sgconf_resolution", None)
        if isinstance(result, ResolutionError):
            msg = "resolution of this record already failed -- fix the input and build a new ServerArgs"
            raise ResolutionError(list(result.problems), header=msg)
        if result is not None:
            if model is not None and _model_config(record, model) != result.model:
                msg = (
                    "this record was already resolved with another model, and a record resolves once "
                    "-- build a new record for this model (attrs.evolve(record) copies it unresolved)"
                )
                raise ConfigError([Problem("$model", msg)], header="cannot resolve against a different model")
            return result
        try:
            result = _resolve(record, _model_config(record, model, require_model))
        except ConfigError as exc:
            failure = ResolutionError(list(exc.problems), header="resolution failed")
            object.__setattr__(record, "_sgconf_resolution", failure)
            raise failure from None
        object.__setattr__(record, "_sgconf_resolution", result)
        return result


def _model_config(record: Any, model: Any, required: bool = False) -> Mapping[str, Any] | None:
    if model is None:
        reader = schema_of(record).model_reader
        return None if reader is None else reader(record, required=required)
    if isinstance(model, Mapping):
        return copy.deepcopy(model)  # a private copy: the caller may go on changing theirs
    for attr in ("to_config", "config"):
        found = getattr(model, attr, None)
        if callable(found):
            found = found()
        if isinstance(found, Mapping):
            return copy.deepcopy(found)
    raise BadArgument(f"model must be a config mapping, got {type(model).__name__}")


def _sources(record: Any, decisions: list[Decision]) -> dict[str, str]:
    """Where each value resolution judged came from: its launch layer, or the step that decided it."""
    launch = provenance_of(record) or {}
    out = {name: chain[-1].describe() for name, chain in launch.items() if chain[-1].layer != "default"}
    out.update((d.field, f"from {d.source}") for d in decisions)
    return out


def _resolve(record: Any, model: Mapping[str, Any] | None) -> Resolved:
    schema = schema_of(record)
    assert schema is not None
    values = record_to_dict(record, schema)
    inputs = model if schema.inputs is None else schema.inputs(values, model)
    decisions: list[Decision] = []
    for step in schema.steps:
        for field, (value, reason) in step(values, inputs).items():
            values[field] = value
            decisions.append(Decision(step.name, field, value, reason))
    problems = check_rules(values, _sources(record, decisions), schema=schema)
    if problems:
        raise ConfigError(problems)
    try:
        # nothing decided: the record is its own resolved form (it is frozen), not a second copy
        resolved = record if not decisions else record_of(values, schema)
    except ValueError as exc:  # a decision broke a field check: a bug in a step, report it as such
        raise ConfigError([Problem("$", f"resolution produced an invalid value: {exc}")]) from None
    return Resolved(record=record, values=resolved, decisions=tuple(decisions), model=model)
