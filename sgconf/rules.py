"""Checking cross-field rules: typed constraints between fields that no single field validator can see.

A `Rule` names the fields it reads; that declaration is checked when a schema freezes
(every name must be a field) and when the rule runs (it sees only those fields), and it is what lets an override re-check only the rules it
could have broken. A rule returns a message, or None when the values are fine. `None`
in a value means "not resolved yet" and never violates a rule on its own: resolution
fills it in and the rules run again on the result.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from sgconf.errors import Problem
from sgconf.hooks import DeclaredReads, Rule, Values

if TYPE_CHECKING:
    from sgconf.declarations import Declarations


def check_rules(
    values: Values,
    sources: Mapping[str, str] | None = None,
    *,
    schema: Declarations,
    rules: Sequence[Rule] | None = None,
    only_touching: set[str] | None = None,
) -> list[Problem]:
    """Run the cross-field rules (`rules`, else the schema's) over flat values; one Problem per violation.

    `only_touching` limits the check to rules that involve at least one of those fields
    (an override re-checks what it could have broken, not unrelated launch choices).
    """
    sources = sources or {}
    problems = []
    if only_touching is not None:
        if rules is None and schema.frozen:
            rules = rules_reading(schema, only_touching)  # what a change could break, found in O(touched)
        else:
            candidates = schema.rules if rules is None else rules
            rules = [r for r in candidates if not r.launch_only and not only_touching.isdisjoint(r.fields)]
    elif rules is None:
        rules = schema.rules
    lookup = schema.field_info
    # one view for the whole run, pointed at each rule's declared fields in turn: building
    # one per rule would cost more than most rules do (the override path runs this per override)
    view = _new_view(DeclaredReads)  # without __init__: each rule sets what it may read below
    view._values = values
    for rule in rules:
        view._allowed = rule._allowed
        view._hook = rule
        message = rule.check(view)
        if message is None:
            continue
        origin = "; ".join(dict.fromkeys(sources[n] for n in rule.fields if n in sources)) or None
        problems.append(Problem(lookup(rule.fields[0]).path, message, origin))
    return problems


_new_view = object.__new__

_SIZED = frozenset({dict, set, frozenset, tuple, list})


def rules_reading(schema: Declarations, names: Iterable[str]) -> list[Rule]:
    """The schema's rules that read one of `names`, in declaration order, from an index built once per frozen schema."""
    cached = schema._cache.get("rules_by_field")
    if cached is not None and cached[0] == len(schema.rules):
        index = cached[1]
    else:
        built: dict[str, list[tuple[int, Rule]]] = {}
        for pos, rule in enumerate(schema.rules):
            if rule.launch_only:
                continue  # never re-checked after publish
            for name in dict.fromkeys(rule.fields):
                built.setdefault(name, []).append((pos, rule))
        index = {name: tuple(found) for name, found in built.items()}
        schema._cache["rules_by_field"] = (len(schema.rules), index)
    # one field (an override's usual case): its rules, in order already; the type test is
    # exact because asking an ABC (`Collection`) costs more than the lookup itself
    if type(names) in _SIZED and len(names) == 1:  # type: ignore[arg-type]
        return [rule for _, rule in index.get(next(iter(names)), ())]
    picked: dict[int, Rule] = {}
    for name in names:
        picked.update(index.get(name, ()))
    return [picked[pos] for pos in sorted(picked)]


__all__ = ["Rule", "Values", "check_rules", "rules_reading"]
