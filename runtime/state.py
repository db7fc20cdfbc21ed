"""What a context shows at one generation (`State`) and the live changes it is made of (`Write`).

The values a context shows are its base (the resolved record, plus overrides folded in
once they left the undo window) with every live write laid on top in commit order; an
override and an open scope are both writes. Taking a write away (a revert, a scope's
exit) recomputes only its fields from what lies underneath, so writes may leave in any
order and each takes exactly its own values with it.
"""

from __future__ import annotations

import itertools
import types
from collections.abc import Iterator, Mapping
from typing import Any, Generic, TypeVar, overload

import attrs

from runtime.fingerprint import Fingerprint
from runtime.overrides import OverrideRecord

EMPTY: types.MappingProxyType[str, Any] = types.MappingProxyType({})

T = TypeVar("T")


class Prefix(Generic[T]):
    """An immutable sequence: the first `n` items of a list that later states extend in place.

    The log, the live writes and each field's stack grow by one item a commit; a tuple
    would be copied whole each time (up to twice the history window), so a commit would
    cost more the more overrides are live. A state's prefix never changes: appending
    to the newest one extends the shared list (older prefixes do not see past their
    `n`); appending to any other copies its items first. Only the writer, under the
    context's lock, appends.
    """

    __slots__ = ("_items", "_n")

    def __init__(self, items: list[T] | tuple[T, ...] = (), n: int | None = None) -> None:
        self._items: list[T] = items if isinstance(items, list) else list(items)
        self._n = len(self._items) if n is None else n

    def plus(self, item: T) -> Prefix[T]:
        """This sequence and `item` after it, in O(1) when this is the newest prefix of its list."""
        items = self._items
        if len(items) != self._n or not items:  # not the newest, or the shared empty one: copy
            items = items[: self._n]
        items.append(item)
        return Prefix(items, self._n + 1)

    def without_last(self) -> Prefix[T]:
        return Prefix(self._items, self._n - 1)

    def __len__(self) -> int:
        return self._n

    def __bool__(self) -> bool:
        return self._n > 0

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[T, ...]: ...
    def __getitem__(self, index: int | slice) -> T | tuple[T, ...]:
        if isinstance(index, slice):
            return tuple(self._items[: self._n][index])
        if index < 0:
            index += self._n
        if not 0 <= index < self._n:
            raise IndexError("prefix index out of range")
        return self._items[index]

    def __iter__(self) -> Iterator[T]:
        return itertools.islice(self._items, self._n)  # bounded: a later append is never seen

    def __reversed__(self) -> Iterator[T]:
        items = self._items
        return (items[i] for i in range(self._n - 1, -1, -1))

    def __contains__(self, item: object) -> bool:
        return any(x is item or x == item for x in self)

    def __repr__(self) -> str:
        return f"Prefix({list(self)!r})"


NONE: Prefix[Any] = Prefix()


# State and Write are built on every commit and never handed out: plain slotted classes,
# whose __init__ stores each field directly (a frozen one pays a setattr call per field);
# nothing assigns to them after __init__.
@attrs.define(slots=True, eq=False)
class Write:
    """One live change: the record that made it, the values it sets, and the scope it belongs to (None: an override)."""

    record: OverrideRecord
    values: types.MappingProxyType[str, Any]
    scope: object | None = None


@attrs.define(slots=True, eq=False)
class State:
    """Everything a context shows at one generation; replaced whole, never mutated."""

    snapshot: Any
    view: Any
    # every leaf by name: a view of `snapshot` that holds no values of its own (`runtime.flatview`)
    flat: Mapping[str, Any]
    # what shows with no live write: a view of the published snapshot until overrides fold into it
    base: Mapping[str, Any]
    writes: Prefix[Write]
    # field -> the live writes that set it, oldest first: what shows is the last one
    stacks: types.MappingProxyType[str, Prefix[Write]]
    # the newest records, oldest first (up to twice the window; the context shows the newest
    # `limit`), and how many were trimmed off before them
    log: Prefix[OverrideRecord]
    dropped: int
    # field -> the newest record that fell out of the window and touched it (explain stays truthful)
    dropped_last: types.MappingProxyType[str, OverrideRecord]
    # the fingerprint of `flat`, built with the state so reading it can never fail
    fingerprint: Fingerprint

    @property
    def generation(self) -> int:
        return int(self.snapshot.generation)

    def top(self, name: str) -> Write | None:
        """The live write whose value of `name` shows, or None when the base value shows."""
        stack = self.stacks.get(name)
        return stack[-1] if stack else None

    def is_live(self, write: Write) -> bool:
        stack = self.stacks.get(next(iter(write.values)), ())
        return any(w is write for w in reversed(stack))

    def write_of(self, record: OverrideRecord) -> Write | None:
        """The live write `record` made, or None once it was taken away or folded into the base."""
        if not record.changes:
            return None
        for write in reversed(self.stacks.get(record.changes[0].name, ())):
            if write.record is record:
                return write
        return None

    def underneath(self, removed: Write) -> dict[str, Any]:
        """What each field of `removed` shows once it is gone: the next live write below, or the base."""
        out: dict[str, Any] = {}
        for name in removed.values:
            stack = self.stacks.get(name, NONE)
            if stack and stack[-1] is not removed:
                out[name] = stack[-1].values[name]  # something above it: nothing changes for this field
                continue
            below = stack[-2] if len(stack) > 1 else None
            out[name] = below.values[name] if below is not None else self.base[name]
        return out

    def same_changes(self, other: State) -> bool:
        """Whether both states carry the same base and the same live writes (generation and log aside)."""
        if len(self.writes) != len(other.writes):
            return False
        if any(a is not b for a, b in zip(self.writes, other.writes, strict=True)):
            return False
        return self.base is other.base or dict(self.base) == dict(other.base)


Stacks = types.MappingProxyType[str, Prefix[Write]]


def with_write(stacks: Mapping[str, Prefix[Write]], write: Write) -> Stacks:
    out = dict(stacks)
    for name in write.values:
        out[name] = out.get(name, NONE).plus(write)
    return types.MappingProxyType(out)


def without_write(stacks: Mapping[str, Prefix[Write]], write: Write) -> Stacks:
    out = dict(stacks)
    for name in write.values:
        stack = out.get(name, NONE)
        kept = stack.without_last() if stack and stack[-1] is write else Prefix([w for w in stack if w is not write])
        if kept:
            out[name] = kept
        else:
            out.pop(name, None)
    return types.MappingProxyType(out)


def without(writes: Prefix[Write], write: Write) -> Prefix[Write]:
    """`writes` with `write` taken out: O(1) when it is the newest (a scope's exit, a revert of the last override)."""
    if writes and writes[-1] is write:
        return writes.without_last()
    return Prefix([w for w in writes if w is not write])


def stacks_of(writes: Prefix[Write]) -> Stacks:
    out: dict[str, list[Write]] = {}
    for write in writes:
        for name in write.values:
            out.setdefault(name, []).append(write)
    return types.MappingProxyType({name: Prefix(stack) for name, stack in out.items()})


def fold(base: Mapping[str, Any], writes: Prefix[Write], limit: int) -> tuple[Mapping[str, Any], Prefix[Write]] | None:
    """Keep at most `limit` live overrides: the oldest ones with nothing live beneath them become base.

    Returns None when nothing needs folding. Folding a write that nothing lies under
    changes no shown value; open scopes never fold. Past the limit it folds down to half
    of it at once, so a long run of overrides pays for one walk every `limit // 2`
    commits, not one per commit.
    """
    if len(writes) <= limit:
        return None
    new_base = dict(base)
    kept: list[Write] = []
    covered: set[str] = set()
    excess = len(writes) - max(limit // 2, 1)
    for write in writes:
        if excess and write.scope is None and covered.isdisjoint(write.values):
            new_base.update(write.values)
            excess -= 1
            continue
        kept.append(write)
        covered.update(write.values)
    return types.MappingProxyType(new_base), Prefix(kept)


__all__ = ["EMPTY", "NONE", "Prefix", "State", "Write", "fold", "stacks_of", "with_write", "without", "without_write"]
