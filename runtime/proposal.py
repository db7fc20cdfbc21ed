"""Proposing an override: every check against the would-be state, before anything changes.

Names, allow-lists, conversion, "resolved stays resolved" and the cross-field rules the
change could break are all checked here; the result is an `OverrideProposal` carrying the
would-be snapshot (copy-on-write: only the touched bags are new), so committing it can no
longer fail for a bad value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from runtime import process
from runtime.dispatch import Dispatching
from runtime.errors import ContextReplacedError
from runtime.flatview import FlatView, Overlay, getters_of
from runtime.overrides import FieldChange, OverrideProposal, detached, inner_source
from sgconf.errors import ConfigError, OverrideRefused, Problem, UnknownFieldError
from sgconf.fieldinfo import FieldInfo
from sgconf.rules import check_rules, rules_reading
from sgconf.suggest import did_you_mean
from sgconf.twin import builder, replaced
from sgconf.validation import convert_value

if TYPE_CHECKING:
    from runtime.roles import Mode
    from runtime.snapshot import Snapshot
    from runtime.state import State
    from sgconf.resolution import Resolved
    from sgconf.schema import Schema


class Proposing(Dispatching):
    """The part of a context that validates a change into a proposal; it declares every slot a context has."""

    __slots__ = (
        "role",
        "record",
        "resolved",
        "role_mode",
        "limit",
        "schema",
        "_routes",
        "_model",
        "_state",
        "_subscribers",
        "_owned",
        "_decided",
    )
    role: str
    record: Any
    resolved: Resolved
    role_mode: Mode
    limit: int
    schema: Schema
    _routes: Mapping[str, tuple[str, str | None]]
    _model: Mapping[str, Any] | None
    _state: State
    _owned: bool
    _decided: frozenset[str]

    def _secret(self, name: str) -> bool:
        return self.schema._fields[name].setting.secret

    def _require_current(self) -> None:
        if not self._owned and process.current is not self:
            msg = "this runtime context was replaced by a later publish() -- call get_context() for the live one"
            raise ContextReplacedError(msg)

    def _propose(self, source: str, values: Mapping[str, Any], *, layer: str, check_source: bool) -> OverrideProposal:
        self._require_current()
        if not isinstance(source, str) or not source.strip():
            raise ConfigError([Problem("$source", f"an override needs a non-empty source name, got {source!r}")])
        if not values:
            raise ConfigError([Problem("$", f"override from {source!r} names no fields -- pass field=value pairs")])
        state = self._state
        origin = f"from override {source}"
        infos = self.schema._fields
        problems: list[Problem] = []
        unknown = refused = False
        converted: dict[str, Any] = {}
        changes: list[FieldChange] = []
        flat = state.flat
        acting = inner_source(source)  # the source a revert acts for
        decided = self._decided
        conv = self.schema.converter
        for name, raw in values.items():
            info = infos.get(name)
            if info is None:
                unknown = True
                problems.append(Problem(f"$.{name}", f"unknown field '{name}'{did_you_mean(name, infos)}", origin))
                continue
            setting = info.setting
            if check_source and not setting.source_allowed(acting):
                refused = True
                problems.append(Problem(info.path, _refusal(info, raw, source), origin))
                continue
            value, problem = convert_value(info, raw, origin, conv)
            if problem is not None:
                problems.append(problem)
            elif name in decided and _is_unresolved(value):
                refused = True
                problems.append(Problem(info.path, _unresolving(info, value, state.base[name]), origin))
            else:
                if type(value) not in _SCALARS:
                    value = detached(value)  # nothing the caller passed in is kept by reference
                converted[name] = value
                changes.append(_change(name, flat[name], value, setting.secret))
        if problems:
            cls = UnknownFieldError if unknown else OverrideRefused if refused else ConfigError
            raise cls(problems, header=f"override from {source!r} rejected, nothing changed")
        rules = rules_reading(self.schema, converted)  # only what this change could break
        if rules:
            would = Overlay(converted, flat)
            # the problems (with their paths and sources) are built only once a rule is broken
            for rule in rules:
                if rule(would) is not None:
                    broken = check_rules(would, dict.fromkeys(converted, origin), schema=self.schema, rules=rules)
                    raise ConfigError(broken, header=f"override from {source!r} rejected, nothing changed")
        snapshot = _evolve(state.snapshot, converted, infos, self._routes, state.snapshot.generation + 1)
        return _proposal(
            self, state, source, layer, tuple(changes), snapshot, FlatView(snapshot, getters_of(self.schema))
        )


# values that cannot change, kept as they are (`detached` copies anything else)
_SCALARS = frozenset({str, int, float, bool, type(None)})

# a commit's own records, whose every field is given and checked: built without attrs' setattr per field
_change = builder(FieldChange)
_proposal = builder(OverrideProposal)


def _is_unresolved(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value == "auto")


def _unresolving(info: FieldInfo, value: Any, resolved: Any) -> str:
    return (
        f"'{info.name}' was resolved to {_shown(info, resolved)!r} at publish and cannot go back to {value!r} "
        "-- override it with a concrete value"
    )


def _shown(info: FieldInfo, value: Any) -> Any:
    return info.shown(value)


def _refusal(info: FieldInfo, raw: Any, source: str) -> str:
    allowed = info.setting.allow_sources
    hint = (
        f"set {info.flag} at launch, or override from one of: {', '.join(allowed)}"
        if allowed
        else f"set {info.flag} at launch"
    )
    return (
        f"'{info.name}' is not hot and source {source!r} is not on its allow-list (got {_shown(info, raw)!r}) -- {hint}"
    )


def _evolve(
    snapshot: Snapshot,
    values: Mapping[str, Any],
    infos: Mapping[str, FieldInfo],
    routes: Mapping[str, tuple[str, str | None]],
    generation: int,
) -> Snapshot:
    """Copy-on-write: new bags for the touched namespaces only; every other bag is shared."""
    if len(values) == 1:  # an override's usual case: one bag (and its parent, for a child namespace)
        top, child = routes[infos[next(iter(values))].namespace]
        bag = getattr(snapshot, top)
        if child is not None:
            values = {child: replaced(getattr(bag, child), values)}
        return replaced(snapshot, {top: replaced(bag, values), "generation": generation})  # type: ignore[no-any-return]
    by_path: dict[str, dict[str, Any]] = {}
    for name, value in values.items():
        by_path.setdefault(infos[name].namespace, {})[name] = value
    tops: dict[str, Any] = {}
    for path, changed in by_path.items():
        top, child = routes[path]
        bag = tops.get(top, getattr(snapshot, top))
        if child is None:
            tops[top] = replaced(bag, changed)
        else:
            tops[top] = replaced(bag, {child: replaced(getattr(bag, child), changed)})
    tops["generation"] = generation
    return replaced(snapshot, tops)  # type: ignore[no-any-return]


__all__ = ["Proposing"]
