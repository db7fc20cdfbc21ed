"""Flat `{field: value}` views that hold no values of their own: a snapshot read by field name, and a change laid over one.

A context used to keep a flat dict of every field next to its bags, and every commit
copied it: a cost and a copy of memory that grew with the schema for a change of one
field. A `FlatView` reads each value straight out of the snapshot's bags through a
per-schema table of getters (built once, with the snapshot class), so a new generation
needs no flat copy at all and the bags stay the one place the values live.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sgconf.declarations import Declarations

Getters = Mapping[str, Callable[[Any], Any]]


def getters_of(schema: Declarations) -> Getters:
    """Field -> a C-level getter from a snapshot of `schema` (`snap.top.field` or `snap.top.child.field`); cached per schema."""
    found = schema._cache.get("flat_getters")
    if found is None:
        routes = schema.routes()
        found = {}
        for name, info in schema._fields.items():
            top, child = routes[info.namespace]
            path = f"{top}.{name}" if child is None else f"{top}.{child}.{name}"
            found[name] = operator.attrgetter(path)
        schema._cache["flat_getters"] = found
    return found  # type: ignore[no-any-return]


class FlatView(Mapping[str, Any]):
    """Every leaf of one snapshot by field name, read on demand; immutable like the snapshot."""

    __slots__ = ("_snapshot", "_get")

    def __init__(self, snapshot: Any, getters: Getters) -> None:
        self._snapshot = snapshot
        self._get = getters

    def __getitem__(self, name: str) -> Any:
        return self._get[name](self._snapshot)

    def __iter__(self) -> Iterator[str]:
        return iter(self._get)

    def __len__(self) -> int:
        return len(self._get)

    def __contains__(self, name: object) -> bool:
        return name in self._get

    def copy(self) -> dict[str, Any]:
        """A plain dict of every value (walks every field: for diagnostics, not per commit)."""
        snap = self._snapshot
        return {name: get(snap) for name, get in self._get.items()}

    def __repr__(self) -> str:
        return f"FlatView(generation={self._snapshot.generation}, fields={len(self._get)})"


class Overlay(Mapping[str, Any]):
    """`changes` laid over `under` without copying it: the would-be values a rule is judged on."""

    __slots__ = ("_changes", "_under")

    def __init__(self, changes: Mapping[str, Any], under: Mapping[str, Any]) -> None:
        self._changes = changes
        self._under = under

    def __getitem__(self, name: str) -> Any:
        changes = self._changes
        return changes[name] if name in changes else self._under[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._under)

    def __len__(self) -> int:
        return len(self._under)

    def __contains__(self, name: object) -> bool:
        return name in self._changes or name in self._under


__all__ = ["FlatView", "Overlay", "getters_of"]
