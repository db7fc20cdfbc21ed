"""What a context shows at one generation (`State`) and the live changes it is made of (`Write`).

The values a context shows are its base (the resolved record, plus overrides folded in
once they left the undo window) with every live write laid on top in commit order; an
override and an open scope are both writes. Taking a write away (a revert, a scope's
exit) recomputes only its fields from what lies underneath, so writes may leave in any
order and each takes exactly its own values with it.
"""

from __future__ import annotations

import types
from collections.abc import Iterator, Mapping
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
    # read-only proxies: `.copy()` of one is a C dict copy (`dict(proxy)` walks it key by key)
    flat: types.MappingProxyType[str, Any]
    base: types.MappingProxyType[str, Any]
    writes: tuple[Write, ...]
    # the newest `limit` records, oldest first, and how many fell out of the window before them
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
        for write in reversed(self.writes):
            if name in write.values:
                return write
        return None

    def write_of(self, record: OverrideRecord) -> Write | None:
        for write in self.writes:
            if write.record is record:
                return write
        return None

    def underneath(self, removed: Write, names: Iterator[str] | tuple[str, ...]) -> dict[str, Any]:
        """What each of `names` shows once `removed` is gone: the next live write below, or the base."""
        out: dict[str, Any] = {}
        for name in names:
            value = self.base[name]
            for write in self.writes:
                if write is not removed and name in write.values:
                    value = write.values[name]
            out[name] = value
        return out

    def same_changes(self, other: State) -> bool:
        """Whether both states carry the same base and the same live writes (generation and log aside)."""
        if len(self.writes) != len(other.writes):
            return False
        if any(a is not b for a, b in zip(self.writes, other.writes, strict=True)):
            return False
        return self.base is other.base or dict(self.base) == dict(other.base)


def fold(base: Mapping[str, Any], writes: tuple[Write, ...], limit: int) -> tuple[types.MappingProxyType[str, Any], tuple[Write, ...]]:
    """Keep at most `limit` live overrides: the oldest ones with nothing live beneath them become base.

    Folding a write that nothing lies under changes no shown value; open scopes never fold.
    """
    if len(writes) <= limit:
        return types.MappingProxyType(dict(base)) if not isinstance(base, types.MappingProxyType) else base, writes
    new_base = dict(base)
    kept: list[Write] = []
    covered: set[str] = set()
    excess = len(writes) - limit
    for write in writes:
        if excess and write.scope is None and covered.isdisjoint(write.values):
            new_base.update(write.values)
            excess -= 1
            continue
        kept.append(write)
        covered.update(write.values)
    return types.MappingProxyType(new_base), tuple(kept)


__all__ = ["EMPTY", "State", "Write", "fold"]
