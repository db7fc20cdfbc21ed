"""What a context shows at one generation (`State`) and the live changes it is made of (`Write`).

The values a context shows are its base (the resolved record, plus overrides folded in
once they left the undo window) with every live write laid on top in commit order; an
override and an open scope are both writes. Taking a write away (a revert, a scope's
exit) recomputes only its fields from what lies underneath, so writes may leave in any
order and each takes exactly its own values with it.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any

import attrs

from runtime.fingerprint import Fingerprint
from runtime.overrides import OverrideRecord

EMPTY: types.MappingProxyType[str, Any] = types.MappingProxyType({})


@attrs.frozen(slots=True, eq=False)
class Write:
    """One live change: the record that made it, the values it sets, and the scope it belongs to (None: an override)."""

    record: OverrideRecord
    values: types.MappingProxyType[str, Any]
    scope: object | None = None


@attrs.frozen(slots=True, eq=False)
class State:
    """Everything a context shows at one generation; replaced whole, never mutated."""

    snapshot: Any
    view: Any
    # every leaf by name: a view of `snapshot` that holds no values of its own (`runtime.flatview`)
    flat: Mapping[str, Any]
    # what shows with no live write: a view of the published snapshot until overrides fold into it
    base: Mapping[str, Any]
    writes: tuple[Write, ...]
    # field -> the live writes that set it, oldest first: what shows is the last one
    stacks: types.MappingProxyType[str, tuple[Write, ...]]
    # the newest records, oldest first (up to twice the window; the context shows the newest
    # `limit`), and how many were trimmed off before them
    log: tuple[OverrideRecord, ...]
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
            stack = self.stacks.get(name, ())
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


def with_write(stacks: Mapping[str, tuple[Write, ...]], write: Write) -> types.MappingProxyType[str, tuple[Write, ...]]:
    out = dict(stacks)
    for name in write.values:
        out[name] = out.get(name, ()) + (write,)
    return types.MappingProxyType(out)


def without_write(
    stacks: Mapping[str, tuple[Write, ...]], write: Write
) -> types.MappingProxyType[str, tuple[Write, ...]]:
    out = dict(stacks)
    for name in write.values:
        stack = out.get(name, ())
        kept = stack[:-1] if stack and stack[-1] is write else tuple(w for w in stack if w is not write)
        if kept:
            out[name] = kept
        else:
            out.pop(name, None)
    return types.MappingProxyType(out)


def stacks_of(writes: tuple[Write, ...]) -> types.MappingProxyType[str, tuple[Write, ...]]:
    out: dict[str, tuple[Write, ...]] = {}
    for write in writes:
        for name in write.values:
            out[name] = out.get(name, ()) + (write,)
    return types.MappingProxyType(out)


def fold(
    base: Mapping[str, Any], writes: tuple[Write, ...], limit: int
) -> tuple[Mapping[str, Any], tuple[Write, ...]] | None:
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
    return types.MappingProxyType(new_base), tuple(kept)


__all__ = ["EMPTY", "State", "Write", "fold", "stacks_of", "with_write", "without_write"]
