"""Committing, taking away and rolling back: the swap of a context's state, with its log window and folding.

Everything a commit can fail on is built before the swap (the record, the write, the next
state, the receipt, the announcement); the swap is one reference assignment, so readers
see the old state or the new, never a mix. A write taken away (a revert, a scope's exit)
shows exactly what lies underneath it; a rollback shows exactly the values before.
"""

from __future__ import annotations

import time
import types
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from runtime import process
from runtime.dispatch import Announcement, _emit
from runtime.errors import RevertConflict, StaleProposalError
from runtime.flatview import FlatView, Overlay, getters_of
from runtime.overrides import (
    CONTEXT_OWNER,
    FieldChange,
    OverrideProposal,
    OverrideReceipt,
    OverrideRecord,
    Owner,
    Subscription,
    shown,
)
from runtime.proposal import Proposing, _change, _evolve
from runtime.roles import make_view
from runtime.state import Prefix, State, Write, fold, stacks_of, with_write, without_write
from sgconf.errors import ConfigError, Problem
from sgconf.rules import check_rules
from sgconf.twin import builder

if TYPE_CHECKING:
    from runtime.scopes import Scope


# a commit's own records, whose every field is given and checked: built without attrs' setattr per field
_record = builder(OverrideRecord)
_receipt = builder(OverrideReceipt)


class Committing(Proposing):
    """The part of a context that swaps its state: commit, remove, rollback, revert, scopes, subscriptions."""

    __slots__ = ()

    def _unsubscribe(self, sub: Subscription) -> None:
        with process.lock:
            self._subscribers = tuple(s for s in self._subscribers if s is not sub)

    def _commit_locked(
        self, proposal: OverrideProposal, scope: Scope | None = None, owner: Owner | None = None
    ) -> tuple[OverrideReceipt, Announcement]:
        if proposal.context is not self:
            raise StaleProposalError([Problem("$", "this proposal was validated on another context")])
        self._require_current()
        state = self._state
        if state is not proposal.base:
            msg = (
                f"config changed since this override was validated (generation {proposal.base_generation}, "
                f"now {state.generation}) -- validate it again"
            )
            raise StaleProposalError([Problem("$", msg)], header=f"override from {proposal.source!r} not committed")
        # everything that can fail is built here, before the swap
        rec = _record(
            proposal.source,
            proposal.layer,
            proposal.snapshot.generation,
            time.time(),
            proposal.changes,
            "set",
            CONTEXT_OWNER if owner is None else owner.owner_name,
        )
        values = {}
        for change in rec.changes:
            values[change.name] = change.new
        write = Write(rec, values, None if scope is None else scope._token)
        new = self._next_state(state, proposal.snapshot, rec, add=write, flat=proposal.flat)
        receipt = _receipt(self, rec, new.view, owner)
        news = self._news("config.override", rec, new)
        self._swap(new)
        if scope is not None:
            scope._write = write
        return receipt, news

    def _next_state(
        self,
        state: State,
        snapshot: Any,
        rec: OverrideRecord,
        *,
        add: Write | None = None,
        remove: Write | None = None,
        restore: State | None = None,
        flat: Mapping[str, Any] | None = None,
    ) -> State:
        """The state after `rec`: one write added or removed (or `restore`'s writes back), the log window moved on.

        `flat` is the proposal's view of `snapshot`, when it has one.
        """
        entries = state.log.plus(rec)
        dropped, dropped_last = state.dropped, state.dropped_last
        # the log holds up to twice its window and trims back to it at once, so a commit never
        # pays for trimming; readers only ever see the newest `limit` records
        if entries.size > 2 * self.limit:
            cut = entries.size - self.limit
            last = dict(dropped_last)
            for old in entries[:cut]:
                for change in old.changes:
                    last[change.name] = old
            entries, dropped, dropped_last = Prefix(entries[cut:]), dropped + cut, types.MappingProxyType(last)
        base, writes, stacks = state.base, state.writes, state.stacks
        if restore is not None:
            base, writes, stacks = restore.base, restore.writes, restore.stacks
        if add is not None:
            writes, stacks = writes.push(add), with_write(stacks, add)
        if remove is not None:
            writes, stacks = writes.without(remove), without_write(stacks, remove)
        folded = fold(base, writes, self.limit) if writes.size > self.limit else None
        if folded is not None:
            base, writes = folded
            stacks = stacks_of(writes)
        return State(  # positional, in declaration order: a commit builds one, and keywords cost more
            snapshot,
            make_view(snapshot, self.role, self.role_mode),
            FlatView(snapshot, getters_of(self.schema)) if flat is None else flat,
            base,
            writes,
            stacks,
            entries,
            dropped,
            dropped_last,
            state.fingerprint.changed(rec.changes),
        )

    def _swap(self, state: State) -> None:
        # one reference assignment each: readers see the old state or the new, never a mix
        self._state = state
        if process.current is self:
            process.show(state.view)

    def _enter_scope(self, scope: Scope) -> Any:
        with process.lock:
            proposal = self._propose("scoped", scope._values, layer="scoped", check_source=False)
            receipt, news = self._commit_locked(proposal, scope)
        self._announce(news)
        return receipt.snapshot

    def _exit_scope(self, write: Write) -> None:
        with process.lock:
            if not self._state.is_live(write):
                return  # a restore (the pytest plugin's, a rollback) already took it away
            news = self._remove_locked(write, "scoped.restore", "scoped")
        self._announce(news)

    def _remove_locked(
        self, write: Write, source: str, layer: str, check: bool = False, owner: str = CONTEXT_OWNER
    ) -> Announcement:
        """Take `write` away: its fields show what lies underneath, as a new generation."""
        state = self._state
        names = tuple(write.values)
        values = state.underneath(write)
        flat = state.flat
        if check:
            origin = f"from override {source}"
            would = Overlay(values, flat)
            broken = check_rules(would, dict.fromkeys(values, origin), only_touching=set(values), schema=self.schema)
            if broken:
                raise ConfigError(broken, header=f"override from {source!r} rejected, nothing changed")
        snapshot = _evolve(state.snapshot, values, self.schema._fields, self._routes, state.generation + 1)
        changes = tuple(_change(n, flat[n], values[n], self._secret(n)) for n in names)
        rec = _record(source, layer, snapshot.generation, time.time(), changes, "remove", owner)
        new = self._next_state(state, snapshot, rec, remove=write)
        news = self._news("config.override", rec, new)
        self._swap(new)
        return news

    def _rollback_locked(self, before: State, source: str, error: BaseException | None = None) -> Rollback:
        """Show exactly the values of `before` again, as a new generation; subscribers not told.

        The log line is returned, not written: `Rollback.finish()` writes it once the writer
        lock is released, then raises `error` (or an interrupt the log sink raised).
        """
        state = self._state
        names = [n for n in before.flat if before.flat[n] is not state.flat[n] and before.flat[n] != state.flat[n]]
        changes = tuple(FieldChange(n, state.flat[n], before.flat[n], secret=self._secret(n)) for n in names)
        snapshot = attrs.evolve(before.snapshot, generation=state.generation + 1)
        rec = OverrideRecord(source, "override", snapshot.generation, time.time(), changes, kind="remove")
        new = attrs.evolve(
            self._next_state(state, snapshot, rec, restore=before),
            fingerprint=before.fingerprint,
        )
        self._swap(new)
        fields = {"source": source, "generation": rec.generation, "fields": {c.name: c.redacted() for c in changes}}
        return Rollback(error, fields)

    def _run_effect_locked(
        self, before: State, source: str, effect: Callable[[OverrideReceipt], Any] | None, receipt: OverrideReceipt
    ) -> Rollback | None:
        """Run `effect(receipt)` after a swap; when it raises, roll back to `before` and say so."""
        if effect is None:
            return None
        try:
            effect(receipt)
        except BaseException as exc:
            return self._rollback_locked(before, f"rollback:{source}", exc)
        return None

    def revert(
        self,
        receipt: OverrideReceipt,
        *,
        owner: Owner | None = None,
        effect: Callable[[OverrideReceipt], Any] | None = None,
    ) -> OverrideReceipt:
        """Take the override of `receipt` away (what `receipt.revert()` does for the context's own receipts).

        `owner` is who made it (an engine reverting its own receipt, at its step boundary);
        a revert of an owner's override from anyone else is refused (RevertConflict), so
        its hold, drain and side effect are never skipped. `effect(new_receipt)` runs right
        after the swap, under the writer lock, as in `commit()`: when it raises, the config
        rolls back and the error propagates.
        """
        rec = receipt.record
        source = f"revert:{rec.source}"
        mine = CONTEXT_OWNER if owner is None else owner.owner_name
        if rec.owner != mine:
            info = self.schema.field_info(rec.fields[0]) if rec.fields else None
            call = "receipt.revert() on the receipt it returned" if owner is None else "revert it through its owner"
            msg = (
                f"the override from {rec.source!r} (generation {rec.generation}) was made through the {rec.owner}, "
                f"which must undo it (step boundary, drain, side effects); reverting it from the {mine} would skip "
                f"that -- call {call}"
            )
            header = f"revert of override from {rec.source!r} (generation {rec.generation}) refused"
            raise RevertConflict(
                [Problem(info.path if info else "$", msg, f"from override {rec.source}")], header=header
            )
        with process.lock:
            self._require_current()
            state = self._state
            problems = []
            write = state.write_of(rec) if rec.kind == "set" else None
            for change in rec.changes:
                top = state.top(change.name)
                if rec.kind == "set":
                    if write is None:
                        why = "that override is no longer applied (reverted, rolled back, or out of the undo window)"
                    elif top is not write and top is not None:
                        why = f"changed since by {top.record.source!r} at generation {top.record.generation}"
                    else:
                        continue
                elif top is not None and top.record.generation > rec.generation:
                    why = f"changed since by {top.record.source!r} at generation {top.record.generation}"
                else:
                    continue
                info = self.schema.field_info(change.name)
                msg = (
                    f"cannot revert '{change.name}' to {shown(change.name, change.old, self.schema)!r}: {why} "
                    "-- revert the later override first, or override the field directly"
                )
                problems.append(Problem(info.path, msg, f"from override {rec.source}"))
            if problems:
                header = f"revert of override from {rec.source!r} (generation {rec.generation}) refused"
                raise RevertConflict(problems, header=header)
            if write is not None:
                news = self._remove_locked(write, source, "override", check=True, owner=mine)
                new = OverrideReceipt(self, news.record, news.snapshot, owner=owner)
            else:  # a revert of a revert: put the values back as a new override
                proposal = self._propose(
                    source, {c.name: c.old for c in rec.changes}, layer="override", check_source=True
                )
                new, news = self._commit_locked(proposal, owner=owner)
            undo = self._run_effect_locked(state, source, effect, new)
        if undo is not None:
            undo.finish()
        self._announce(news)
        return new


@attrs.frozen(slots=True, eq=False)
class Rollback:
    """A rollback that happened under the writer lock: the error that caused it and its log line, written after."""

    error: BaseException | None
    fields: dict[str, Any]

    def finish(self) -> None:
        """Write the `config.rollback` line, then raise the error; an interrupt from the log sink wins, never lost."""
        stop = _emit("warning", "config.rollback", **self.fields)
        if stop is not None:
            raise stop from self.error
        if self.error is not None:
            raise self.error


__all__ = ["Committing", "Rollback"]
