"""Values describing post-publish overrides: what changed, the proposal, the receipt, the event.

All are frozen. The context (`runtime.context`) builds them; consumers read them. This
module imports nothing else of the runtime: the context reaches these values, never the
other way round, so a receipt knows its context only as the `Reverter` it calls back.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from sgconf.frozen import thaw
from sgconf.redaction import redact

if TYPE_CHECKING:
    from sgconf.declarations import Declarations

REVERT_PREFIX = "revert:"


class Reverter(Protocol):
    """What a receipt needs from the context that issued it: a way to undo it."""

    def revert(self, receipt: OverrideReceipt, *, owner: Owner | None = None) -> OverrideReceipt: ...

    def _unsubscribe(self, sub: Subscription) -> None: ...


class Owner(Protocol):
    """Who made an override through the context and must undo it: an engine holds its step boundary, drains, detaches.

    A receipt committed with an owner reverts through `owner.revert(receipt)`; the
    context refuses a revert of it that does not come from that owner.
    """

    owner_name: str

    def revert(self, receipt: OverrideReceipt) -> OverrideReceipt: ...


CONTEXT_OWNER = "context"


def inner_source(source: str) -> str:
    """The source a revert acts for: `revert:revert:hicache.attach` -> `hicache.attach`."""
    while source.startswith(REVERT_PREFIX):
        source = source[len(REVERT_PREFIX) :]
    return source


def shown(name: str, value: Any, schema: Declarations) -> Any:
    """Field `name`'s value as it may be logged or served: redacted when the field is secret."""
    info = schema._fields.get(name)
    return value if info is None else info.shown(value)


_SCALARS = (str, int, float, bool, type(None))


def detached(value: Any) -> Any:
    """`value` itself when it cannot change (a scalar), else a deep copy the caller may keep or mutate."""
    if isinstance(value, _SCALARS):
        return value
    return copy.deepcopy(value)


@attrs.frozen(slots=True, repr=False)
class FieldChange:
    """One field an override set: its value before and after."""

    name: str
    old: Any
    new: Any
    # whether the field is secret in its schema: every representation redacts it then
    secret: bool = attrs.field(default=False, kw_only=True, eq=False)

    def redacted(self) -> dict[str, Any]:
        """`{"old": ..., "new": ...}` as plain data (lists and dicts, deep copies), secrets redacted."""
        return {"old": thaw(redact(self.old, self.secret)), "new": thaw(redact(self.new, self.secret))}

    def __repr__(self) -> str:
        old, new = redact(self.old, self.secret), redact(self.new, self.secret)
        return f"FieldChange(name={self.name!r}, old={old!r}, new={new!r})"


@attrs.frozen(slots=True)
class OverrideRecord:
    """One committed override as kept in the log: source, layer, the changes, generation and wall time."""

    source: str
    layer: str
    generation: int
    time: float
    changes: tuple[FieldChange, ...]
    # "set": the override added these values; "remove": it took an earlier override (or a
    # scope) away, so what shows now is whatever lay underneath
    kind: str = attrs.field(default="set", kw_only=True)
    # who made it and must undo it: "context" for a plain override, else the owner's name
    owner: str = attrs.field(default=CONTEXT_OWNER, kw_only=True, eq=False)

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.changes)

    def change_of(self, name: str) -> FieldChange | None:
        for c in self.changes:
            if c.name == name:
                return c
        return None

    def as_dict(self, redact: bool = True) -> dict[str, Any]:
        """Plain data (for `/server_info` and logs); secrets redacted unless asked."""
        return {
            "source": self.source,
            "layer": self.layer,
            "generation": self.generation,
            "time": self.time,
            "fields": {
                c.name: (c.redacted() if redact else {"old": detached(c.old), "new": detached(c.new)})
                for c in self.changes
            },
        }


@attrs.frozen(slots=True, eq=False, repr=False)
class OverrideProposal:
    """A validated override not yet committed: `context.commit(proposal)` applies it if nothing changed since.

    `base` is the exact state it was validated against; `snapshot` and `flat` are the
    would-be state. Validation already ran, so committing cannot fail for a bad value.
    """

    context: Any
    base: Any
    source: str
    layer: str
    changes: tuple[FieldChange, ...]
    snapshot: Any
    flat: Mapping[str, Any]

    @property
    def base_generation(self) -> int:
        return self.base.snapshot.generation

    @property
    def values(self) -> dict[str, Any]:
        """The converted values the override sets, `{field: new}`."""
        return {c.name: c.new for c in self.changes}

    def __repr__(self) -> str:
        names = ", ".join(c.name for c in self.changes)
        return f"OverrideProposal(source={self.source!r}, base_generation={self.base_generation}, fields=[{names}])"


class _OfRecord:
    """`source`, `generation`, `changes` and `fields` of a committed override, read from `self.record`."""

    __slots__ = ()
    record: OverrideRecord

    @property
    def source(self) -> str:
        return self.record.source

    @property
    def generation(self) -> int:
        return self.record.generation

    @property
    def changes(self) -> tuple[FieldChange, ...]:
        return self.record.changes

    @property
    def fields(self) -> tuple[str, ...]:
        return self.record.fields


@attrs.frozen(slots=True, eq=False, repr=False)
class OverrideReceipt(_OfRecord):
    """What `override()` returns: the committed record and the snapshot it produced; can `revert()`."""

    context: Reverter
    record: OverrideRecord
    snapshot: Any
    # the owner that made it (an engine), through which it reverts; None: the context itself
    owner: Owner | None = attrs.field(default=None, kw_only=True)

    @property
    def owner_name(self) -> str:
        """Whose change this is: `"context"`, or the owner's name (`"engine"`) that reverts it."""
        return self.record.owner

    def revert(self) -> OverrideReceipt:
        """Take this override away again, as a new override from `revert:<source>` with a new generation.

        What shows afterwards is what lay underneath: the override before it, or the
        resolved value, so two overrides of one field may be undone in either order of
        their receipts once the later one is gone. Reverting a revert puts the values
        back. Raises RevertConflict when a later override still covers one of these
        fields, or when this override is no longer applied. A receipt of an owner (an
        engine) reverts through it: at a step boundary, after a drain, its side effect undone.
        """
        if self.owner is not None:
            return self.owner.revert(self)
        return self.context.revert(self)

    def __repr__(self) -> str:
        names = ", ".join(self.fields)
        return (
            f"OverrideReceipt(source={self.source!r}, generation={self.generation}, fields=[{names}], "
            f"owner={self.owner_name!r})"
        )


@attrs.frozen(slots=True)
class ConfigEvent(_OfRecord):
    """What a subscriber receives after a commit: the record and the snapshot it produced."""

    record: OverrideRecord
    snapshot: Any


Subscriber = Callable[[ConfigEvent], Any]


@attrs.frozen(slots=True, eq=False)
class Subscription:
    """A handle returned by `subscribe()`; `unsubscribe()` is idempotent; usable as a context manager."""

    context: Reverter = attrs.field(repr=False)
    callback: Subscriber
    fields: frozenset[str] | None

    def wants(self, changed: tuple[str, ...]) -> bool:
        return self.fields is None or not self.fields.isdisjoint(changed)

    def unsubscribe(self) -> None:
        self.context._unsubscribe(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.unsubscribe()


def iter_changes(records: tuple[OverrideRecord, ...], name: str) -> Iterator[tuple[OverrideRecord, FieldChange]]:
    for rec in records:
        change = rec.change_of(name)
        if change is not None:
            yield rec, change
