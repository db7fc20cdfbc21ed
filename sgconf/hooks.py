"""The typed hooks a schema declares besides its fields: cross-field `Rule`s, resolution `Step`s, `Derived` values, runtime knobs.

Each names what it reads (fields, or for a derived value the namespaces), and a schema
checks those names when it freezes, and a rule or step runs on the declared fields only, so a typo is a `DeclarationError` at import rather
than a `KeyError` at the first load. A copy of a schema that leaves a namespace out
leaves out the hooks that read it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs

from sgconf.errors import UndeclaredReadError

Values = Mapping[str, Any]


class DeclaredReads(Mapping[str, Any]):
    """The values a rule or step runs on, restricted to the fields it declares it reads.

    The declaration is what a copy of a schema and an override's re-check rely on, so a
    read it does not cover is an `UndeclaredReadError` naming the hook and the field, not
    a `KeyError` the first time a copy leaves that field out. Built once per call: a few
    slots, no copy of the values; `check_rules` points one view at each rule in turn. A
    view is valid during the call it was given to, not after.
    """

    __slots__ = ("_values", "_allowed", "_hook")

    def __init__(self, values: Values, allowed: frozenset[str], hook: Rule | Step | None) -> None:
        self._values = values
        self._allowed = allowed
        self._hook = hook

    def __getitem__(self, name: str) -> Any:
        if name in self._allowed:
            return self._values[name]
        raise self._undeclared(name)

    def __contains__(self, name: object) -> bool:
        if name in self._allowed:
            return name in self._values
        raise self._undeclared(name)

    def get(self, name: str, default: Any = None) -> Any:
        if name in self._allowed:
            return self._values.get(name, default)
        raise self._undeclared(name)

    def __iter__(self) -> Iterator[str]:
        reads = self._hook.reads if self._hook is not None else ()
        return (n for n in reads if n in self._values)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def _undeclared(self, name: object) -> UndeclaredReadError:
        hook = self._hook
        what, where = ("resolution step", "reads") if isinstance(hook, Step) else ("rule", "fields")
        return UndeclaredReadError(
            f"{what} {getattr(hook, 'name', '?')!r} read {name!r}, which it does not declare -- add it to the {what}'s {where}"
        )


@attrs.frozen(slots=True)
class Rule:
    """A named cross-field check over `fields`; `check` returns a message or None."""

    name: str
    fields: tuple[str, ...]
    check: Callable[[Values], str | None]
    # A launch-only rule constrains the inputs pools are sized from; post-publish
    # overrides are not held to it (the derived accessors take the max instead).
    launch_only: bool = False
    _allowed: frozenset[str] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_allowed", frozenset(self.fields))

    @property
    def reads(self) -> tuple[str, ...]:
        """The fields the rule reads (its `fields`), named as a step names them."""
        return self.fields

    def __call__(self, values: Values) -> str | None:
        """Judge `values`; the check sees only the declared `fields` (see `DeclaredReads`)."""
        return self.check(DeclaredReads(values, self._allowed, self))


Decisions = Mapping[str, tuple[Any, str]]


@attrs.frozen(slots=True)
class Step:
    """One resolution step: its name (provenance `resolution:<name>`), the fields it reads, and what it runs.

    `run(values, inputs)` returns `{field: (value, reason)}` for what it decided. The
    declared reads are checked against the schema when it freezes, and a copy of a schema
    that leaves one of them out leaves the step out too.
    """

    name: str
    reads: tuple[str, ...]
    run: Callable[[Values, Any], Decisions]
    _allowed: frozenset[str] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_allowed", frozenset(self.reads))

    def __call__(self, values: Values, inputs: Any) -> Decisions:
        """Run the step; it sees only the declared `reads` of `values` (see `DeclaredReads`)."""
        return self.run(DeclaredReads(values, self._allowed, self), inputs)


@attrs.frozen(slots=True)
class Derived:
    """A value computed from the bags, offered as `snapshot.<name>()`; it follows overrides.

    `compute(view)` reads the bags as attributes of `view` (a snapshot, or a role-guarded
    view of one), and only the ones in `namespaces` (`"spec"`, `"exec.mamba"`): a schema
    checks they exist when it freezes, and a copy that leaves one out drops the value.
    """

    name: str
    namespaces: tuple[str, ...]
    compute: Callable[[Any], Any]

    def __call__(self, view: Any) -> Any:
        return self.compute(view)

    @property
    def doc(self) -> str | None:
        """What the value is: the compute function's docstring."""
        return self.compute.__doc__


@attrs.frozen(slots=True)
class RuntimeKnobs:
    """Which fields of a schema the runtime itself reads; a knob left None keeps the runtime's default.

    `history_limit` (int): how many overrides a context's log keeps (default 256).
    `sync_timeout` (float, seconds): how long a config group's round waits for every rank
    (default 30). `verbosity` (a level name) and `log_style` (`console` or `json`): what
    the runtime's logging is configured from, the level read live at every event.
    """

    history_limit: str | None = None
    sync_timeout: str | None = None
    verbosity: str | None = None
    log_style: str | None = None

    def names(self) -> dict[str, str]:
        """knob -> field for the knobs a schema sets."""
        return {k: v for k, v in attrs.asdict(self).items() if v is not None}


__all__ = ["DeclaredReads", "Decisions", "Derived", "Rule", "RuntimeKnobs", "Step", "Values"]
