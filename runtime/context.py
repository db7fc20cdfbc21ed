"""The process-wide runtime context: publish once, read lock-free, override with provenance.

One owner holds the global state (`_current`, plus the view the accessors read). Readers
take no lock: the state of a context is one immutable `State`, replaced in a single
reference assignment. Writers (publish, override, commit, scoped, revert) serialize on
one re-entrant lock.

The promises a context keeps, each stated once:

1. **Commit is the last step that can fail.** Validation, the new bags, the fingerprint,
   the record, the receipt, the event and the log line's fields are all built before
   the swap. After it, nothing the caller sees raises out of `override()`, `commit()`,
   `revert()` or a scope: the `config.override` log line and every subscriber run
   isolated, after the writer lock is released. An `Exception` from a subscriber or a
   log sink is logged (`config.subscriber_failed`) or written to stderr and swallowed.
   A `BaseException` that is not an `Exception` (`KeyboardInterrupt`, `SystemExit`)
   means the process is being stopped: it is recorded, logged once
   (`config.subscriber_interrupted`), every later subscriber still runs, and then it is
   re-raised from the call. The commit stands in that case too: the new state is live
   and every subscriber heard of it.
2. **Side effects roll back.** `apply_override(source, effect, ...)` validates first,
   swaps, runs `effect(receipt)`; when the effect fails the config goes back to the exact
   values before it as a new generation (`rollback:<source>`), and the error propagates.
3. **Generations strictly increase** for the life of a context: every change, a scope's
   entry and exit and every revert included, gets a new, higher generation.
4. **Scopes are stacks with identity.** A scope's exit takes exactly its own values
   away, whatever the order in which scopes close and from whichever thread, task or
   generator; later overrides of other fields and other scopes stay.
5. **Undo in any order.** A revert takes its override away and shows what lies
   underneath, so the receipts of two overrides of one field may be reverted in either
   order once the later one is gone; each step is logged.
6. **Resolved stays resolved.** No override puts `None`/`auto` back into a field that
   resolution decided; `publish(record, model=...)` refuses a model other than the one
   the record was already resolved with.
7. **Nothing is aliased.** Every value handed out (bags, snapshots, `resolved_dict()`,
   `explain()`, the overrides log, `model`, receipts, events) is immutable or a deep
   copy; nothing a caller passes in is kept by reference.
8. **Equal configs, equal fingerprints.** The fingerprint hashes canonical values, so
   records that compare equal hash equal, and any change of a counted field changes it.
9. **Bounded memory.** The overrides log keeps the newest `overrides_log_limit` records
   and counts what it dropped (`dropped_overrides()`); `explain()` is exact for fields
   whose overrides are still in the window. Older overrides fold into the base and can
   no longer be reverted one by one.
10. **Role `enforce` covers every read of config.** Bags, snapshots and `value()` raise
    `RoleViolation` outside the role's namespaces; `resolved_dict()` leaves those
    namespaces out. The overrides log and `explain()` are the audit trail of what changed
    (a data-parallel controller commits memory fields it never acts on, and reports
    them), and the config group compares ranks through `group_values()`; none of these
    is filtered.

This module is long because every promise above is kept by one object under one lock:
splitting publish, override, scopes and reverts apart would spread that lock's invariants
over several files.
"""

from __future__ import annotations

import copy
import sys
import threading
import time
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import structlog

from runtime import accessors
from runtime.errors import (
    ContextReplacedError,
    NotPublishedError,
    RevertConflict,
    StaleProposalError,
)
from runtime.fingerprint import Fingerprint
from runtime.overrides import (
    ConfigEvent,
    FieldChange,
    OverrideProposal,
    OverrideReceipt,
    OverrideRecord,
    Subscriber,
    Subscription,
    detached,
    inner_source,
    shown,
)
from runtime.roles import Mode, check_role, make_view, mode_from_env
from runtime.snapshot import Snapshot, snapshot_class
from runtime.state import EMPTY, State, Write, fold, stacks_of, with_write, without_write
from sgconf.errors import ConfigError, OverrideRefused, Problem, UnknownFieldError
from sgconf.loading import explain as launch_explain
from sgconf.provenance import Origin
from sgconf.registry import FieldInfo
from sgconf.resolution import Resolved, resolve_once
from sgconf.rules import check_rules
from sgconf.schema import Schema, schema_of
from sgconf.suggest import did_you_mean
from sgconf.validation import convert_fields

log = structlog.get_logger("sgconf.runtime")

# Writers serialize here; re-entrant so a restore may run inside a publish's error path.
_lock = threading.RLock()
_current: RuntimeContext | None = None

# Called (under the lock) by reset(): modules that keep state about the live context
# register here, so this module never imports them.
_reset_hooks: list[Callable[[], None]] = []

_UNRESOLVED = (None, "auto")


@attrs.frozen(slots=True, eq=False)
class _Announcement:
    """What a commit tells the world once it is live: the log line's fields and the subscribers' event."""

    event_name: str
    fields: dict[str, Any]
    event: ConfigEvent
    subscribers: tuple[Subscription, ...]


class Scope:
    """One open `scoped()` block: enter adds its values on top, exit takes exactly them away.

    Each scope is its own write with its own identity, so scopes may close in any order,
    from any thread, task or generator. A scope is entered once; exit is idempotent.
    """

    __slots__ = ("_context", "_values", "_token", "_write", "_closed")

    def __init__(self, context: RuntimeContext, values: dict[str, Any]) -> None:
        self._context = context
        self._values = values
        self._token = object()
        self._write: Write | None = None
        self._closed = False

    def __enter__(self) -> Any:
        if self._write is not None or self._closed:
            raise RuntimeError("this scope was already entered -- call ctx.scoped(...) again for a new one")
        try:
            # the write is stored by _enter itself, before anything after the swap can raise,
            # so the finally below always has what it must take away
            return self._context._enter_scope(self)
        except BaseException:
            if self._write is not None:
                self.__exit__()
            raise

    def __exit__(self, *exc: object) -> None:
        if self._write is None or self._closed:
            return
        self._closed = True
        self._context._exit_scope(self._write)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open" if self._write is not None else "new"
        return f"Scope({', '.join(self._values)}; {state})"


class RuntimeContext:
    """The published configuration of this process: one record, resolved once, with its overrides.

    Obtain it from `publish()` or `get_context()`. Read bags through the accessors or a
    `snapshot()`; change hot fields through `override()`. See the module docstring for
    the promises it keeps under failure, concurrency and scopes.
    """

    __slots__ = ("role", "record", "resolved", "role_mode", "limit", "schema", "_routes", "_model", "_state", "_subscribers")

    def __init__(self, record: Any, resolved: Resolved, *, role: str, role_mode: Mode) -> None:
        self.role = role
        self.record = record
        self.resolved = resolved
        self._model = copy.deepcopy(resolved.model)
        self.role_mode: Mode = role_mode
        schema = schema_of(record)
        assert schema is not None, "publish() checks the record"
        self.schema: Schema = schema  # the schema the record belongs to: names, routes, bags and roles
        # namespace path -> (top-level bag, attribute inside a group bag or None), for copy-on-write
        self._routes = schema.routes()
        snapshot = snapshot_class(schema).from_bags(0, resolved.bags())
        flat = types.MappingProxyType(snapshot.flat())
        self.limit = int(flat.get("overrides_log_limit", 256))
        self._state = State(
            snapshot=snapshot,
            view=make_view(snapshot, role, role_mode),
            flat=flat,
            base=flat,
            writes=(),
            stacks=types.MappingProxyType({}),
            log=(),
            dropped=0,
            dropped_last=EMPTY,
            fingerprint=Fingerprint.of(flat, schema),
        )
        self._subscribers: tuple[Subscription, ...] = ()

    # -- reading -----------------------------------------------------------------------

    @property
    def model(self) -> Mapping[str, Any] | None:
        """The model config resolution used (a deep copy: changing it changes nothing here)."""
        return copy.deepcopy(self._model)

    @property
    def generation(self) -> int:
        """0 at publish; higher after every change."""
        return self._state.generation

    def snapshot(self) -> Snapshot:
        """Every bag at the current generation, immutable; read several values for one decision from it.

        When the role mode is record/enforce this is a role-checked view with the same names.
        """
        return self._state.view

    def value(self, name: str) -> Any:
        """The current value of one flat field (overrides applied); raises UnknownFieldError, RoleViolation."""
        info = self.schema.field_info(name)
        state = self._state
        self._read(state, info)
        return detached(state.flat[name])

    def group_values(self, names: Iterable[str]) -> dict[str, Any]:
        """`{name: value}` for the config group to compare and copy between ranks (deep copies).

        Not role-checked: the group moves config between ranks of one role, it does not act
        on it. Raises UnknownFieldError for an undeclared name.
        """
        flat = self._state.flat
        return {name: detached(flat[self.schema.field_info(name).name]) for name in names}

    def fingerprint(self) -> str:
        """Stable hex hash of the counted resolved leaves, overrides applied; built at each commit."""
        return self._state.fingerprint.digest

    def resolved_dict(self, redact: bool = True) -> dict[str, Any]:
        """The resolved config with overrides applied, nested by namespace, as a deep copy; secrets `"***"` when `redact`.

        In role mode `enforce`, namespaces outside the role's set are left out.
        """
        state = self._state
        allowed = self._allowed_tops()
        out: dict[str, Any] = {}
        for top in state.snapshot.bag_names:
            if top in allowed:
                getattr(state.view, top)  # record mode notes the read
        for name, info in self.schema._fields.items():
            top, child = self._routes[info.namespace]
            if top not in allowed:
                continue
            target = out.setdefault(top, {})
            if child is not None:
                target = target.setdefault(child, {})
            value = state.flat[name]
            if redact:
                value = shown(name, value, self.schema)
            target[name] = _plain(value)
        return out

    def overrides_log(self) -> tuple[OverrideRecord, ...]:
        """The newest committed changes, oldest first (at most `overrides_log_limit`); see `dropped_overrides()`.

        Not filtered by role: it is the audit of what this process changed (a data-parallel
        controller commits memory fields it never reads), with secrets redacted in `as_dict()`.
        """
        return self._state.log[-self.limit :]

    def dropped_overrides(self) -> int:
        """How many records fell out of the overrides log's window since publish."""
        state = self._state
        return state.dropped + max(0, len(state.log) - self.limit)

    def explain(self, name: str) -> list[Origin]:
        """The provenance chain of `name`: launch layers, resolution, then each override; winner last.

        Exact while the field's overrides are in the log's window; when older ones fell out,
        the newest dropped one stands for them. Raises UnknownFieldError (with a
        did-you-mean) for an undeclared name. Like the log, not filtered by role.
        """
        info = self.schema.field_info(name)
        state = self._state
        secret = info.spec.secret
        chain = [attrs.evolve(o, value=detached(o.value)) for o in launch_explain(self.record, name, self.resolved)]
        older, window = state.log[: -self.limit], state.log[-self.limit :]
        dropped = next((rec for rec in reversed(older) if rec.change_of(name) is not None), None)
        dropped = dropped or state.dropped_last.get(name)
        in_window = [(rec, c) for rec in window if (c := rec.change_of(name)) is not None]
        if dropped is not None and (not in_window or in_window[0][0].generation > dropped.generation):
            change = dropped.change_of(name)
            detail = f"{dropped.source} (newest of {self.dropped_overrides()} dropped from the log window)"
            value = detached(change.new if change else None)
            chain.append(Origin(dropped.layer, detail, value, dropped.generation, dropped.time, secret=secret))
        for rec, change in in_window:
            chain.append(Origin(rec.layer, rec.source, detached(change.new), rec.generation, rec.time, secret=secret))
        return chain

    def subscribers(self) -> tuple[Subscription, ...]:
        return self._subscribers

    # -- overriding --------------------------------------------------------------------

    def override(self, source: str, /, **values: Any) -> OverrideReceipt:
        """Validate, then atomically apply `values` from `source`; all or nothing.

        Raises UnknownFieldError (unknown name), OverrideRefused (field not hot and
        `source` not on its allow-list, or a resolved field set back to None/auto),
        ConfigError (bad type, choice or cross-field rule), ContextReplacedError (a later
        publish replaced this context); on any of these nothing changed. A value equal to
        the current one still commits: the log records what was asked, and when.
        """
        with _lock:
            proposal = self._propose(source, values, layer="override", check_source=True)
            receipt, news = self._commit_locked(proposal)
        self._announce(news)
        return receipt

    def apply_override(self, source: str, effect: Callable[[OverrideReceipt], Any], /, **values: Any) -> OverrideReceipt:
        """`override()` for a change with a side effect: validate, swap, then run `effect(receipt)`.

        The writer lock is held from validation to the end of `effect`, so nothing else
        commits in between. When `effect` raises, the config goes back to the exact values
        before the override, as a new generation from `rollback:<source>`, and the error
        propagates; subscribers hear of neither. Prepare whatever can fail early (open
        files, connect) before calling this, so `effect` only switches over.
        """
        with _lock:
            proposal = self._propose(source, values, layer="override", check_source=True)
            return self.commit(proposal, effect=effect)

    def validate_override(self, source: str, /, **values: Any) -> OverrideProposal:
        """Dry run of `override()`: every check against the would-be state; changes nothing.

        Returns a proposal that `commit()` applies if the config has not changed since.
        """
        with _lock:
            return self._propose(source, values, layer="override", check_source=True)

    def validate_catch_up(self, source: str, /, *, generation: int, **values: Any) -> OverrideProposal:
        """Dry run of a catch-up: `values` land as one override at `generation`, not generation + 1.

        For a rank that fell behind its config group (`runtime.distributed`): the group is at
        `generation` and each value was already accepted there from its own source, so the
        caller checks allow-lists per field against those sources; names, types and
        cross-field rules are checked here as for any override. Raises ConfigError when
        `generation` is not ahead of this context.
        """
        with _lock:
            if generation <= self.generation:
                msg = (
                    f"a catch-up to generation {generation} is not ahead of this context "
                    f"(generation {self.generation}) -- nothing to catch up"
                )
                raise ConfigError([Problem("$generation", msg)], header=f"catch-up from {source!r} rejected")
            proposal = self._propose(source, values, layer="override", check_source=False)
            return attrs.evolve(proposal, snapshot=attrs.evolve(proposal.snapshot, generation=generation))

    def commit(self, proposal: OverrideProposal, *, effect: Callable[[OverrideReceipt], Any] | None = None) -> OverrideReceipt:
        """Apply a proposal from `validate_override()`; raises StaleProposalError if anything changed since.

        With `effect`, it runs right after the swap, under the writer lock; when it raises,
        the config rolls back as in `apply_override()` and the error propagates.
        """
        with _lock:
            before = self._state
            receipt, news = self._commit_locked(proposal)
            if effect is not None:
                try:
                    effect(receipt)
                except BaseException:
                    self._rollback_locked(before, f"rollback:{proposal.source}")
                    raise
        self._announce(news)
        return receipt

    def scoped(self, **values: Any) -> Scope:
        """Override any fields (hot or not) for a `with` block; the block's snapshot is what `as` gives.

        For tests. Values are converted and rules checked like any override (ConfigError,
        nothing changed). On exit exactly these values are taken away again, as a new
        generation; overrides and scopes opened meanwhile stay. Subscribers hear both the
        entry (`scoped`) and the exit (`scoped.restore`).
        """
        return Scope(self, values)

    def subscribe(self, callback: Subscriber, fields: Iterable[str] | None = None) -> Subscription:
        """Call `callback(event)` after each commit that changes one of `fields` (any field when None).

        Callbacks run in the committing thread, after the writer lock is released, so
        with several writers events may arrive out of generation order: compare
        `event.generation` (it strictly increases), or read `get_context().snapshot()`
        for the latest state. Raises UnknownFieldError for an undeclared field name.
        """
        wanted = None
        if fields is not None:
            names = [fields] if isinstance(fields, str) else list(fields)
            for name in names:
                self.schema.field_info(name)
            wanted = frozenset(names)
        sub = Subscription(self, callback, wanted)
        with _lock:
            self._subscribers = (*self._subscribers, sub)
        return sub

    # -- internals ---------------------------------------------------------------------

    def _unsubscribe(self, sub: Subscription) -> None:
        with _lock:
            self._subscribers = tuple(s for s in self._subscribers if s is not sub)

    def _secret(self, name: str) -> bool:
        return self.schema._fields[name].spec.secret

    def _require_current(self) -> None:
        if _current is not self:
            msg = "this runtime context was replaced by a later publish() -- call get_context() for the live one"
            raise ContextReplacedError(msg)

    def _allowed_tops(self) -> frozenset[str] | tuple[str, ...]:
        if self.role_mode == "enforce":
            return self.schema.roles()[self.role]
        return self._state.snapshot.bag_names

    def _read(self, state: State, info: FieldInfo) -> None:
        # the view checks (enforce) or records (record) the namespace, as a bag read would
        getattr(state.view, self._routes[info.namespace][0])

    def _propose(self, source: str, values: Mapping[str, Any], *, layer: str, check_source: bool) -> OverrideProposal:
        self._require_current()
        if not isinstance(source, str) or not source.strip():
            raise ConfigError([Problem("$source", f"an override needs a non-empty source name, got {source!r}")])
        if not values:
            raise ConfigError([Problem("$", f"override from {source!r} names no fields -- pass field=value pairs")])
        state = self._state
        origin = f"from override {source}"
        infos = self.schema._fields
        problems: list[Problem] = []
        unknown = refused = False
        converted: dict[str, Any] = {}
        acting = inner_source(source)
        decided = self.resolved.decisions
        for name, raw in values.items():
            info = infos.get(name)
            if info is None:
                unknown = True
                problems.append(Problem(f"$.{name}", f"unknown field '{name}'{did_you_mean(name, infos)}", origin))
                continue
            if check_source and not info.spec.source_allowed(acting):
                refused = True
                problems.append(Problem(info.path, _refusal(info, raw, source), origin))
                continue
            good, bad = convert_fields({name: raw}, {name: origin}, schema=self.schema)
            problems.extend(bad)
            for key, value in good.items():
                if _is_unresolved(value) and any(d.field == key for d in decided):
                    refused = True
                    problems.append(Problem(info.path, _unresolving(info, value, state.base[key]), origin))
                    continue
                converted[key] = detached(value)  # nothing the caller passed in is kept by reference
        header = f"override from {source!r} rejected, nothing changed"
        if problems:
            cls = UnknownFieldError if unknown else OverrideRefused if refused else ConfigError
            raise cls(problems, header=header)
        would = state.flat.copy()
        would.update(converted)
        broken = check_rules(would, dict.fromkeys(converted, origin), only_touching=set(converted), schema=self.schema)
        if broken:
            raise ConfigError(broken, header=header)
        changes = tuple(FieldChange(name, state.flat[name], new, secret=infos[name].spec.secret) for name, new in converted.items())
        snapshot = _evolve(state.snapshot, converted, infos, self._routes, state.generation + 1)
        return OverrideProposal(self, state, source, layer, changes, snapshot, types.MappingProxyType(would))

    def _commit_locked(self, proposal: OverrideProposal, scope: Scope | None = None) -> tuple[OverrideReceipt, _Announcement]:
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
        rec = OverrideRecord(proposal.source, proposal.layer, proposal.snapshot.generation, time.time(), proposal.changes)
        write = Write(rec, types.MappingProxyType({c.name: c.new for c in rec.changes}), None if scope is None else scope._token)
        new = self._next_state(state, proposal.snapshot, proposal.flat, rec, add=write)
        receipt = OverrideReceipt(self, rec, new.view)
        news = self._news("config.override", rec, new)
        self._swap(new)
        if scope is not None:
            scope._write = write
        return receipt, news

    def _next_state(
        self,
        state: State,
        snapshot: Any,
        flat: types.MappingProxyType[str, Any],
        rec: OverrideRecord,
        *,
        add: Write | None = None,
        remove: Write | None = None,
        restore: State | None = None,
    ) -> State:
        """The state after `rec`: one write added or removed (or `restore`'s writes back), the log window moved on."""
        entries = state.log + (rec,)
        dropped, dropped_last = state.dropped, state.dropped_last
        # the log holds up to twice its window and trims back to it at once, so a commit never
        # pays for trimming; readers only ever see the newest `limit` records
        if len(entries) > 2 * self.limit:
            cut = len(entries) - self.limit
            last = dict(dropped_last)
            for old in entries[:cut]:
                last.update(dict.fromkeys(old.fields, old))
            entries, dropped, dropped_last = entries[cut:], dropped + cut, types.MappingProxyType(last)
        base, writes, stacks = state.base, state.writes, state.stacks
        if restore is not None:
            base, writes, stacks = restore.base, restore.writes, restore.stacks
        if add is not None:
            writes, stacks = writes + (add,), with_write(stacks, add)
        if remove is not None:
            if writes and writes[-1] is remove:
                writes = writes[:-1]
            else:
                writes = tuple(w for w in writes if w is not remove)
            stacks = without_write(stacks, remove)
        folded = fold(base, writes, self.limit)
        if folded is not None:
            base, writes = folded
            stacks = stacks_of(writes)
        return State(
            snapshot=snapshot,
            view=make_view(snapshot, self.role, self.role_mode),
            flat=flat,
            base=base,
            writes=writes,
            stacks=stacks,
            log=entries,
            dropped=dropped,
            dropped_last=dropped_last,
            fingerprint=state.fingerprint.updated(flat, rec.fields),
        )

    def _news(self, event_name: str, rec: OverrideRecord, new: State) -> _Announcement:
        rendered = {
            "source": rec.source,
            "layer": rec.layer,
            "generation": rec.generation,
            "fields": {c.name: c.redacted() for c in rec.changes},
        }
        return _Announcement(event_name, rendered, ConfigEvent(rec, new.view), self._subscribers)

    def _swap(self, state: State) -> None:
        # one reference assignment each: readers see the old state or the new, never a mix
        self._state = state
        if _current is self:
            accessors._set_view(state.view)

    def _enter_scope(self, scope: Scope) -> Any:
        with _lock:
            proposal = self._propose("scoped", scope._values, layer="scoped", check_source=False)
            receipt, news = self._commit_locked(proposal, scope)
        self._announce(news)
        return receipt.snapshot

    def _exit_scope(self, write: Write) -> None:
        with _lock:
            if not self._state.is_live(write):
                return  # a restore (the pytest plugin's, a rollback) already took it away
            news = self._remove_locked(write, "scoped.restore", "scoped")
        self._announce(news)

    def _remove_locked(self, write: Write, source: str, layer: str, check: bool = False) -> _Announcement:
        """Take `write` away: its fields show what lies underneath, as a new generation."""
        state = self._state
        names = tuple(write.values)
        values = state.underneath(write)
        if check:
            would = state.flat.copy()
            would.update(values)
            origin = f"from override {source}"
            broken = check_rules(would, dict.fromkeys(values, origin), only_touching=set(values), schema=self.schema)
            if broken:
                raise ConfigError(broken, header=f"override from {source!r} rejected, nothing changed")
        flat = state.flat.copy()
        flat.update(values)
        snapshot = _evolve(state.snapshot, values, self.schema._fields, self._routes, state.generation + 1)
        changes = tuple(FieldChange(n, state.flat[n], values[n], secret=self._secret(n)) for n in names)
        rec = OverrideRecord(source, layer, snapshot.generation, time.time(), changes, kind="remove")
        new = self._next_state(state, snapshot, types.MappingProxyType(flat), rec, remove=write)
        news = self._news("config.override", rec, new)
        self._swap(new)
        return news

    def _rollback_locked(self, before: State, source: str) -> OverrideRecord:
        """Show exactly the values of `before` again, as a new generation; logged, subscribers not told."""
        state = self._state
        names = [n for n in before.flat if before.flat[n] is not state.flat[n] and before.flat[n] != state.flat[n]]
        changes = tuple(FieldChange(n, state.flat[n], before.flat[n], secret=self._secret(n)) for n in names)
        snapshot = attrs.evolve(before.snapshot, generation=state.generation + 1)
        rec = OverrideRecord(source, "override", snapshot.generation, time.time(), changes, kind="remove")
        new = attrs.evolve(
            self._next_state(state, snapshot, before.flat, rec, restore=before),
            fingerprint=before.fingerprint,
        )
        self._swap(new)
        _emit("warning", "config.rollback", source=source, generation=rec.generation,
              fields={c.name: c.redacted() for c in changes})
        return rec

    def _announce(self, news: _Announcement) -> None:
        """Log the commit and notify subscribers, each isolated; re-raise a BaseException only after all ran."""
        stop = _emit("info", news.event_name, **news.fields)
        changed = news.event.fields
        for sub in news.subscribers:
            if not sub.wants(changed):
                continue
            try:
                sub.callback(news.event)
            except Exception as exc:  # a subscriber must not undo a commit or starve the others
                stop = stop or _emit(
                    "error", "config.subscriber_failed", subscriber=_name_of(sub.callback), source=news.event.source,
                    generation=news.event.generation, error=f"{type(exc).__name__}: {exc}",
                )
            except BaseException as exc:  # the process is being stopped: finish notifying, then stop
                if stop is None:
                    stop = exc
                    _emit("error", "config.subscriber_interrupted", subscriber=_name_of(sub.callback),
                          source=news.event.source, generation=news.event.generation, error=type(exc).__name__)
        if stop is not None:
            raise stop

    def _revert(self, receipt: OverrideReceipt) -> OverrideReceipt:
        rec = receipt.record
        source = f"revert:{rec.source}"
        with _lock:
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
                news = self._remove_locked(write, source, "override", check=True)
                new = OverrideReceipt(self, news.event.record, news.event.snapshot)
            else:  # a revert of a revert: put the values back as a new override
                proposal = self._propose(source, {c.name: c.old for c in rec.changes}, layer="override", check_source=True)
                new, news = self._commit_locked(proposal)
        self._announce(news)
        return new

    def __repr__(self) -> str:
        return f"RuntimeContext(role={self.role!r}, generation={self.generation}, overrides={len(self.overrides_log())})"


def _emit(level: str, event: str, **fields: Any) -> BaseException | None:
    """Log one event; a failing sink is reported on stderr, never raised; a BaseException is returned."""
    try:
        getattr(log, level)(event, **fields)
    except Exception as exc:
        try:
            sys.stderr.write(f"sgconf: could not log {event} ({type(exc).__name__}: {exc})\n")
        except Exception:  # noqa: S110 - nowhere left to report to
            pass
    except BaseException as exc:
        return exc
    return None


def _name_of(callback: Any) -> str:
    return getattr(callback, "__qualname__", None) or repr(callback)


def _is_unresolved(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value == "auto")


def _unresolving(info: FieldInfo, value: Any, resolved: Any) -> str:
    return (
        f"'{info.name}' was resolved to {_shown(info, resolved)!r} at publish and cannot go back to {value!r} "
        "-- override it with a concrete value"
    )


def _shown(info: FieldInfo, value: Any) -> Any:
    return "***" if info.spec.secret and value is not None else value


def _plain(value: Any) -> Any:
    """A deep, plain copy (dicts and lists) of a config value, for JSON and callers who mutate."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _refusal(info: FieldInfo, raw: Any, source: str) -> str:
    allowed = info.spec.allow_sources
    hint = (
        f"set {info.flag} at launch, or override from one of: {', '.join(allowed)}"
        if allowed
        else f"set {info.flag} at launch"
    )
    return (
        f"'{info.name}' is not hot and source {source!r} is not on its allow-list "
        f"(got {_shown(info, raw)!r}) -- {hint}"
    )


def _evolve(
    snapshot: Snapshot,
    values: Mapping[str, Any],
    infos: Mapping[str, FieldInfo],
    routes: Mapping[str, tuple[str, str | None]],
    generation: int,
) -> Snapshot:
    """Copy-on-write: new bags for the touched namespaces only; every other bag is shared."""
    by_path: dict[str, dict[str, Any]] = {}
    for name, value in values.items():
        by_path.setdefault(infos[name].namespace, {})[name] = value
    tops: dict[str, Any] = {}
    for path, changed in by_path.items():
        top, child = routes[path]
        bag = tops.get(top, getattr(snapshot, top))
        if child is None:
            tops[top] = _replaced(bag, changed)
        else:
            tops[top] = _replaced(bag, {child: _replaced(getattr(bag, child), changed)})
    tops["generation"] = generation
    return _replaced(snapshot, tops)  # type: ignore[no-any-return]


def _replaced(obj: Any, changes: Mapping[str, Any]) -> Any:
    """`attrs.evolve` for values validated already (each override value was converted and checked).

    Fills the slots of a new frozen instance directly, the way attrs' own `__init__` does,
    so a commit does not pay for running every validator of the bag again.
    """
    cls = type(obj)
    new = object.__new__(cls)
    for a in attrs.fields(cls):
        object.__setattr__(new, a.name, changes[a.name] if a.name in changes else getattr(obj, a.name))
    return new


# -- the process-wide owner ----------------------------------------------------------------


def publish(record: Any, *, role: str, model: Mapping[str, Any] | Any | None = None) -> RuntimeContext:
    """Resolve `record` once and make it the live config of this process, generation 0.

    `model` is the HF-style config mapping handed to `resolve_once` (None: read from
    model_path, or the model the record was already resolved with). Re-publishing
    replaces everything (last publish wins) and logs `config.republish` with the
    overrides it dropped. Raises ConfigError for an unknown role, a bad
    `SGCONF_ROLE_NAMESPACES`, or a `model` other than the one the record was already
    resolved with; ResolutionError when resolution fails; TypeError for anything but a
    record of a frozen schema (or an instance of a dataclass adopted with
    `sgconf.from_dataclass`, converted and checked first). On any error the previous
    context stays live.
    """
    schema = schema_of(record)
    if schema is None:
        msg = (
            f"publish() takes a record of an sgconf schema (a ServerArgs), got {type(record).__name__} "
            "-- build one with sgconf.load(...) or schema.load(...), or adopt your dataclass with sgconf.from_dataclass"
        )
        raise TypeError(msg)
    record = schema.as_record(record)
    check_role(role, schema)
    mode = mode_from_env()
    resolved = resolve_once(record, model)
    ctx = RuntimeContext(record, resolved, role=role, role_mode=mode)
    with _lock:
        old = _install(ctx)
    if old is not None:
        _emit(
            "info",
            "config.republish",
            role=role,
            previous_role=old.role,
            previous_generation=old.generation,
            dropped_overrides=[rec.as_dict() for rec in old._state.log[-old.limit :]],
        )
    return ctx


def _install(ctx: RuntimeContext | None) -> RuntimeContext | None:
    """Make `ctx` live (None: nothing published); returns the one it replaced. Caller holds the lock."""
    global _current
    old = _current
    _current = ctx
    accessors._set_view(accessors.UNPUBLISHED if ctx is None else ctx._state.view)
    return old


def on_reset(hook: Callable[[], None]) -> None:
    """Run `hook()` (under the writer lock) whenever `reset()` forgets the live context."""
    if hook not in _reset_hooks:
        _reset_hooks.append(hook)


def get_context() -> RuntimeContext:
    """The live context; raises NotPublishedError before publish."""
    ctx = _current
    if ctx is None:
        msg = (
            "no runtime config is published: get_context() was called before publish() -- call "
            "runtime.publish(record, role=...) at startup, or use runtime.override_server_args(...) "
            "or the server_args pytest fixture in tests"
        )
        raise NotPublishedError(msg)
    return ctx


def is_published() -> bool:
    return _current is not None


def get_server_args() -> Any:
    """The raw published record, for diagnostics only: it never shows overrides. Read the bags instead."""
    return get_context().record


def assert_published(record: Any, *, role: str | None = None) -> RuntimeContext:
    """Check that `record` (and `role`, when given) is what is published; return the live context.

    For constructors that must not publish again. Raises NotPublishedError when nothing
    is published, ConfigError when another record or role is.
    """
    ctx = get_context()
    problems = []
    if ctx.record is not record and ctx.record != record:
        problems.append(
            Problem("$record", "the published record differs from the one given -- pass get_server_args(), or publish() it first")
        )
    if role is not None and ctx.role != role:
        problems.append(Problem("$role", f"published with role {ctx.role!r}, expected {role!r} -- publish with role={role!r}"))
    if problems:
        raise ConfigError(problems, header="runtime context does not match")
    return ctx


def reset() -> None:
    """Forget the published context (tests): every accessor raises again until the next publish."""
    with _lock:
        _install(None)
        for hook in _reset_hooks:
            hook()


__all__ = [
    "RuntimeContext",
    "Scope",
    "assert_published",
    "get_context",
    "get_server_args",
    "is_published",
    "on_reset",
    "publish",
    "reset",
]
