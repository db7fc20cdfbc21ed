"""Which names hold a raw record where: bindings per scope, and how branches join.

This module knows nothing about syntax or about what a read is; the scanner tells it
"this name is now bound to the record (or to something else)" and asks "what does this
name hold here". It follows Python's lookup rules: a function sees enclosing functions
and the module, never a class body; a `:=` inside a comprehension binds in the nearest
enclosing non-comprehension scope.

Branches are merged where they join: each arm of an `if`/`elif`/`else`, `try`/`except`/
`else`, `match` or loop starts from the bindings before the statement, and afterwards a
name counts if it may hold the record on any path (a ratchet must not miss a read
because the non-record arm happens to come last). Loop bodies are walked once and nested
functions see the bindings of their enclosing scope where they are defined: the analysis
stays a single pass, fast and predictable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class Binding:
    """One binding of a name to the record; the codemod needs to know how it is used."""

    __slots__ = ("kind", "name", "stmt", "origin", "holds", "uses_other", "reads", "sources", "flows_out")

    def __init__(
        self,
        kind: str,
        name: str,
        stmt: tuple[int, int] | None,
        sources: tuple[Binding, ...] = (),
        *,
        origin: str = "published",
        holds: str = "record",
    ) -> None:
        self.kind = kind  # "alias" or "parameter"
        self.name = name
        # where the record comes from (`tools.ratchet.reads.Reads.origin`): published,
        # instance, passed or built; only a published one may become an accessor read
        self.origin = origin
        # "record", or "loaded" for what a schema's load() returns (its `.record` is one)
        self.holds = holds
        # (line, col) of a removable `name = <record>` statement, when it is one
        self.stmt = stmt
        self.uses_other = False  # the name is used for something other than field reads
        self.reads: list[Any] = []  # the scanner's findings read through this binding
        # set on the binding that stands for the name where branches join and it may hold
        # the record on some paths only; `sources` are the bindings of those paths
        self.sources = sources
        # the binding reaches a join and the name is used after it: its statement must stay
        self.flows_out = False

    @property
    def built(self) -> bool:
        """The record was built here (`ServerArgs(...)`, a copy), so it is not the published one."""
        return self.origin == "built"

    def use(self) -> None:
        """The name is looked up here; a use after a join keeps every source binding alive."""
        for source in self.sources:
            if not source.flows_out:
                source.flows_out = True
                source.use()


_UNSET: Any = object()

Names = dict[str, "Binding | None"]


class _Scope:
    __slots__ = ("kind", "names")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.names: Names = {}


class _Join:
    """A branching statement being walked: the scope it binds in and the states to merge."""

    __slots__ = ("scope", "entry", "ends", "seen")

    def __init__(self, scope: _Scope, *, track: bool) -> None:
        self.scope = scope
        self.entry: Names = dict(scope.names)
        self.ends: list[Names] = []  # the states at the end of each finished arm
        # try bodies: every binding made in the body, since an exception may leave anywhere
        self.seen: dict[str, list[Binding | None]] | None = {} if track else None


def merge(states: Sequence[Names]) -> Names:
    """The bindings where paths join: a name that may hold the record on any path still does."""
    first = states[0]
    merged = dict(first)
    changed = {name for state in states[1:] for name, b in state.items() if first.get(name, _UNSET) is not b}
    changed |= {name for name in first if any(name not in state for state in states[1:])}
    for name in changed:
        merged[name] = join_values(name, [state.get(name, _UNSET) for state in states])
    return merged


def join_values(name: str, values: Sequence[Binding | None]) -> Binding | None:
    """One name's binding where paths join; `values` holds `_UNSET` where a path leaves it unbound."""
    records = list({id(v): v for v in values if isinstance(v, Binding)}.values())
    if not records:
        return None
    if len(records) == 1 and all(v is records[0] for v in values):
        return records[0]
    origins = {r.origin for r in records}
    origin = next(o for o in ("built", "passed", "instance", "published") if o in origins or o == "published")
    return Binding(records[0].kind, name, None, sources=tuple(records), origin=origin, holds=records[0].holds)


class Scopes:
    """The scope stack of one module walk, plus the branch joins currently open."""

    __slots__ = ("stack", "joins")

    def __init__(self) -> None:
        self.stack: list[_Scope] = [_Scope("module")]
        self.joins: list[_Join] = []

    # -- scopes -------------------------------------------------------------------------
    def push(self, kind: str) -> None:
        """Enter a function, lambda, class body or comprehension."""
        self.stack.append(_Scope(kind))

    def pop(self) -> None:
        self.stack.pop()

    def lookup(self, name: str) -> Binding | None:
        stack = self.stack
        innermost = stack[-1]
        if name in innermost.names:
            return innermost.names[name]
        for scope in reversed(stack[:-1]):
            if scope.kind == "class":
                continue
            if name in scope.names:
                return scope.names[name]
        return None

    def bind(self, name: str, binding: Binding | None, *, walrus: bool = False) -> None:
        scope = self.stack[-1]
        if walrus:
            for candidate in reversed(self.stack):
                if candidate.kind != "comprehension":
                    scope = candidate
                    break
        scope.names[name] = binding
        for join in self.joins:
            if join.seen is not None and join.scope is scope:
                join.seen.setdefault(name, []).append(binding)

    @property
    def names(self) -> Names:
        return self.stack[-1].names

    # -- branches: each arm starts from the entry state, the arms merge where they join ---
    def open_join(self, *, track: bool = False) -> None:
        self.joins.append(_Join(self.stack[-1], track=track))

    def end_arm(self) -> None:
        """Keep the state at the end of the arm just walked; the next arm starts at the entry."""
        join = self.joins[-1]
        join.ends.append(join.scope.names)
        join.scope.names = dict(join.entry)

    def restart_arm(self, state: Names) -> None:
        """Start the next arm from `state` (a handler from the try body's states)."""
        self.joins[-1].scope.names = dict(state)

    def keep_arm(self) -> None:
        join = self.joins[-1]
        join.ends.append(dict(join.scope.names))

    def loop_exit(self) -> None:
        """The body ran zero or more times; `else` (and what follows) sees either state."""
        join = self.joins[-1]
        join.ends.append(join.scope.names)
        join.scope.names = merge([join.entry, join.scope.names])

    def close_join(self, *, with_entry: bool = False, with_current: bool = True) -> None:
        """Merge the arms; `with_entry` when no arm may run (a `match` without a catch-all)."""
        join = self.joins.pop()
        states = [*join.ends]
        if with_current:
            states.append(join.scope.names)
        if with_entry:
            states.append(join.entry)
        join.scope.names = merge(states)

    def try_body_done(self) -> tuple[Names, Names]:
        """After a try body: (the state where `else` starts, the state every handler starts from).

        An exception may leave the body anywhere, so a handler sees the entry state, the end
        state, or any binding made in between.
        """
        join = self.joins[-1]
        body_end = dict(join.scope.names)
        entry = merge([join.entry, body_end])
        for name, values in (join.seen or {}).items():
            entry[name] = join_values(name, [entry.get(name, _UNSET), *values])
        join.seen = None
        return body_end, entry
