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
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar, overload

import attrs

from runtime.fingerprint import Fingerprint
from runtime.flatview import Overlay
from runtime.overrides import OverrideRecord

EMPTY: types.MappingProxyType[str, Any] = types.MappingProxyType({})

T = TypeVar("T")


class Prefix(Generic[T]):
    """An immutable sequence: the first `n` items of a list that later states extend in place.

    The override log grows by one record a commit; a tuple would be copied whole each
    time (up to twice the history window), so a commit would cost more the longer the
    log. A state's prefix never changes: appending to the newest one extends the shared
    list (older prefixes do not see past their `n`); appending to any other copies its
    items first. Only the writer, under the context's lock, appends.
    """

    __slots__ = ("_items", "size")

    def __init__(self, items: list[T] | tuple[T, ...] = (), n: int | None = None) -> None:
        self._items: list[T] = items if isinstance(items, list) else list(items)
        self.size = len(self._items) if n is None else n  # read directly on a commit: no __len__ call

    def plus(self, item: T) -> Prefix[T]:
        """This sequence and `item` after it, in O(1) when this is the newest prefix of its list."""
        items = self._items
        if len(items) != self.size or not items:  # not the newest, or the shared empty one: copy
            items = items[: self.size]
        items.append(item)
        return Prefix(items, self.size + 1)

    def __len__(self) -> int:
        return self.size

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[T, ...]: ...
    def __getitem__(self, index: int | slice) -> T | tuple[T, ...]:
        if isinstance(index, slice):
            return tuple(self._items[: self.size][index])
        if index < 0:
            index += self.size
        if not 0 <= index < self.size:
            raise IndexError("prefix index out of range")
        return self._items[index]

    def __iter__(self) -> Iterator[T]:
        return itertools.islice(self._items, self.size)  # bounded: a later append is never seen

    def __repr__(self) -> str:
        return f"Prefix({list(self)!r})"


class Stack(Generic[T]):
    """A persistent stack: `push` and `below` share everything underneath, so both are O(1).

    The live writes and each field's writes are stacks: an override or a scope's entry
    pushes, a scope's exit (or a revert of the newest override) pops, and neither copies
    what lies below, however many overrides are live. Iterating goes oldest first.
    """

    __slots__ = ("top", "below", "size")

    def __init__(self, top: T | None = None, below: Stack[T] | None = None, size: int = 0) -> None:
        self.top = top  # the newest item (None only on the empty stack)
        self.below = below
        self.size = size

    @classmethod
    def of(cls, items: Iterable[T]) -> Stack[T]:
        out: Stack[T] = EMPTY_STACK
        for item in items:
            out = out.push(item)
        return out

    def push(self, item: T) -> Stack[T]:
        return Stack(item, self, self.size + 1)

    def newest_first(self) -> Iterator[T]:
        node: Stack[T] | None = self
        while node is not None and node.size:
            yield node.top  # type: ignore[misc]
            node = node.below

    def without(self, item: T) -> Stack[T]:
        """This stack with `item` (by identity) taken out: O(1) when it is the top."""
        if self.size and self.top is item:
            return self.below  # type: ignore[return-value]
        return Stack.of([x for x in self if x is not item])

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[T]:
        return reversed(list(self.newest_first()))

    def __contains__(self, item: object) -> bool:
        return any(x is item for x in self.newest_first())

    def __repr__(self) -> str:
        return f"Stack({list(self)!r})"


NONE: Prefix[Any] = Prefix()
EMPTY_STACK: Stack[Any] = Stack()


# State and Write are built on every commit and never handed out: plain slotted classes,
# whose __init__ stores each field directly (a frozen one pays a setattr call per field);
# nothing assigns to them after __init__.
@attrs.define(slots=True, eq=False)
class Write:
    """One live change: the record that made it, the values it sets, and the scope it belongs to (None: an override)."""

    record: OverrideRecord
    # the values it sets: a dict of its own, never handed out, so it needs no read-only proxy
    values: Mapping[str, Any]
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
    writes: Stack[Write]
    # field -> the live writes that set it: what shows is the top one
    stacks: types.MappingProxyType[str, Stack[Write]]
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
        return stack.top if stack else None

    def is_live(self, write: Write) -> bool:
        stack = self.stacks.get(next(iter(write.values)), EMPTY_STACK)
        return stack.top is write or write in stack

    def write_of(self, record: OverrideRecord) -> Write | None:
        """The live write `record` made, or None once it was taken away or folded into the base."""
        if not record.changes:
            return None
        for write in self.stacks.get(record.changes[0].name, EMPTY_STACK).newest_first():
            if write.record is record:
                return write
        return None

    def underneath(self, removed: Write) -> dict[str, Any]:
        """What each field of `removed` shows once it is gone: the next live write below, or the base."""
        out: dict[str, Any] = {}
        for name in removed.values:
            stack = self.stacks.get(name, EMPTY_STACK)
            if stack and stack.top is not removed:
                out[name] = stack.top.values[name]  # type: ignore[union-attr]  # something above it: nothing changes
                continue
            below = stack.below.top if stack else None  # type: ignore[union-attr]  # None on the empty stack
            out[name] = below.values[name] if below is not None else self.base[name]
        return out

    def same_changes(self, other: State) -> bool:
        """Whether both states carry the same base and the same live writes (generation and log aside)."""
        if len(self.writes) != len(other.writes):
            return False
        if any(a is not b for a, b in zip(self.writes, other.writes, strict=True)):
            return False
        return self.base is other.base or dict(self.base) == dict(other.base)


Stacks = types.MappingProxyType[str, Stack[Write]]


# `.copy()` of the proxy copies the dict beneath at C speed; `dict(proxy)` would go through
# the mapping protocol key by key, several times slower with every field that has a live write
def with_write(stacks: Stacks, write: Write) -> Stacks:
    out = stacks.copy()
    for name in write.values:
        out[name] = out.get(name, EMPTY_STACK).push(write)
    return types.MappingProxyType(out)


def without_write(stacks: Stacks, write: Write) -> Stacks:
    out = stacks.copy()
    for name in write.values:
        kept = out.get(name, EMPTY_STACK).without(write)
        if kept:
            out[name] = kept
        else:
            out.pop(name, None)
    return types.MappingProxyType(out)


def stacks_of(writes: Stack[Write]) -> Stacks:
    out: dict[str, Stack[Write]] = {}
    for write in writes:
        for name in write.values:
            out[name] = out.get(name, EMPTY_STACK).push(write)
    return types.MappingProxyType(out)


def fold(base: Mapping[str, Any], writes: Stack[Write], limit: int) -> tuple[Mapping[str, Any], Stack[Write]] | None:
    """Keep at most `limit` live overrides: the oldest ones with nothing live beneath them become base.

    Returns None when nothing needs folding. Folding a write that nothing lies under
    changes no shown value; open scopes never fold. Past the limit it folds down to half
    of it at once, so a long run of overrides pays for one walk every `limit // 2`
    commits, not one per commit. The new base is the folded values laid over the
    published ones (`Overlay`): a fold costs what was folded, never a copy of every field.
    """
    if len(writes) <= limit:
        return None
    if isinstance(base, Overlay):
        folded, published = dict(base._changes), base._under
    else:
        folded, published = {}, base
    kept: list[Write] = []
    covered: set[str] = set()
    excess = len(writes) - max(limit // 2, 1)
    for write in writes:
        if excess and write.scope is None and covered.isdisjoint(write.values):
            folded.update(write.values)
            excess -= 1
            continue
        kept.append(write)
        covered.update(write.values)
    return Overlay(folded, published), Stack.of(kept)


__all__ = [
    "EMPTY",
    "EMPTY_STACK",
    "NONE",
    "Prefix",
    "Stack",
    "State",
    "Write",
    "fold",
    "stacks_of",
    "with_write",
    "without_write",
]
