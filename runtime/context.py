"""`RuntimeContext`: one published (or created) configuration, and the calls that publish, create and activate one.

A context reads lock-free: its state is one immutable `State`, replaced in a single
reference assignment. Writers (publish, override, commit, scoped, revert) serialize on
the process writer lock (`runtime.process.lock`); validation lives in `runtime.proposal`,
the swap in `runtime.commit`, the announcement in `runtime.dispatch`, scopes in
`runtime.scopes`. The process-wide state itself (what is published, what is active in
each thread or task) is owned by `runtime.process`.

The promises a context keeps, each stated once:

1. **Commit is the last step that can fail.** Everything is built before the swap;
   after it nothing the caller sees raises out of `override()`, `commit()`, `revert()` or
   a scope, and the log line and every subscriber run isolated, after the writer lock is
   released, on every path. A `KeyboardInterrupt`/`SystemExit` from one of them is
   re-raised once every subscriber heard of the commit, which stands.
2. **Side effects roll back.** `apply_override(source, effect, ...)` validates, swaps,
   runs `effect(receipt)`; when it fails the config goes back to the exact values before
   it as a new generation (`rollback:<source>`), and the error propagates.
3. **Generations strictly increase** for the life of a context.
4. **Scopes are stacks with identity.** A scope's exit takes exactly its own values away,
   in any order, from any thread, task or generator.
5. **Undo in any order.** A revert shows what lies underneath its override.
6. **Resolved stays resolved.** No override puts `None`/`auto` back into a field that
   resolution decided; `publish(record, model=...)` refuses a model other than the one
   the record was already resolved with.
7. **Nothing is aliased.** Every value handed out is immutable or a deep copy.
8. **Equal configs, equal fingerprints.**
9. **Bounded memory.** The overrides log keeps the newest records (the schema's
   `history_limit` knob, 256 by default) and counts what it dropped.
10. **Role `enforce` covers every read of config** through bags, snapshots and `value()`;
    the overrides log, `explain()` and `group_values()` are the audit trail, not filtered.

Several contexts may live in one process: `create_context(record, role=...)` builds one
that is never published (an engine owns it), and `use_context(ctx)` makes it the one the
accessors and `get_context()` read in the calling thread or asyncio task for a block.
"""

from __future__ import annotations

import contextlib
import copy
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import attrs

from runtime import process
from runtime.commit import Committing, Rollback
from runtime.dispatch import Announcement, _emit
from runtime.errors import NotPublishedError
from runtime.fingerprint import Fingerprint
from runtime.flatview import FlatView, getters_of
from runtime.overrides import (
    OverrideProposal,
    OverrideReceipt,
    OverrideRecord,
    Owner,
    Subscriber,
    Subscription,
    detached,
    shown,
)
from runtime.roles import Mode, check_role, make_view, mode_from_env
from runtime.scopes import Scope
from runtime.snapshot import Snapshot, snapshot_class
from runtime.state import EMPTY, EMPTY_STACK, NONE, State
from sgconf.errors import ConfigError, Problem
from sgconf.fieldinfo import FieldInfo
from sgconf.frozen import thaw
from sgconf.loading import explain as launch_explain
from sgconf.provenance import Origin
from sgconf.resolution import Resolved, resolve_once
from sgconf.schema import Schema, schema_of

DEFAULT_HISTORY_LIMIT = 256


class RuntimeContext(Committing):
    """The published configuration of this process: one record, resolved once, with its overrides.

    Obtain it from `publish()` or `get_context()`. Read bags through the accessors or a
    `snapshot()`; change hot fields through `override()`. See the module docstring for
    the promises it keeps under failure, concurrency and scopes.
    """

    __slots__ = ()

    def __init__(self, record: Any, resolved: Resolved, *, role: str, role_mode: Mode, owned: bool = False) -> None:
        self.role = role
        # owned: made by create_context() for one engine, never published, so never replaced
        self._owned = owned
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
        flat = FlatView(snapshot, getters_of(schema))
        # the fields resolution decided, which no override may set back to None/auto
        self._decided = frozenset(d.field for d in resolved.decisions)
        limit_field = schema.knob("history_limit")
        self.limit = int(flat[limit_field]) if limit_field is not None else DEFAULT_HISTORY_LIMIT
        self._state = State(
            snapshot=snapshot,
            view=make_view(snapshot, role, role_mode),
            flat=flat,
            base=flat,
            writes=EMPTY_STACK,
            stacks=types.MappingProxyType({}),
            log=NONE,
            dropped=0,
            dropped_last=EMPTY,
            fingerprint=Fingerprint.of(flat, schema),
        )
        self._subscribers: tuple[Subscription, ...] = ()

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
        """The resolved config with overrides applied, nested by namespace, as a deep copy; secrets redacted when `redact`.

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
            target[name] = thaw(value)
        return out

    def overrides_log(self) -> tuple[OverrideRecord, ...]:
        """The newest committed changes, oldest first (at most the schema's history limit); see `dropped_overrides()`.

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
        secret = info.setting.secret
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

    def override(self, source: str, /, **values: Any) -> OverrideReceipt:
        """Validate, then atomically apply `values` from `source`; all or nothing.

        Raises UnknownFieldError (unknown name), OverrideRefused (field not hot and
        `source` not on its allow-list, or a resolved field set back to None/auto),
        ConfigError (bad type, choice or cross-field rule), ContextReplacedError (a later
        publish replaced this context); on any of these nothing changed. A value equal to
        the current one still commits: the log records what was asked, and when.
        """
        with process.lock:
            proposal = self._propose(source, values, layer="override", check_source=True)
            receipt, news = self._commit_locked(proposal)
        self._announce(news)
        return receipt

    def apply_override(
        self, source: str, effect: Callable[[OverrideReceipt], Any], /, **values: Any
    ) -> OverrideReceipt:
        """`override()` for a change with a side effect: validate, swap, then run `effect(receipt)`.

        The writer lock is held from validation to the end of `effect`, so nothing else
        commits in between; subscribers run after it is released. When `effect` raises, the config goes back to the exact values
        before the override, as a new generation from `rollback:<source>`, and the error
        propagates; subscribers hear of neither. Prepare whatever can fail early (open
        files, connect) before calling this, so `effect` only switches over.
        """
        with process.lock:
            proposal = self._propose(source, values, layer="override", check_source=True)
            receipt, news, undo = self._commit_effect_locked(proposal, effect, None)
        if undo is not None:
            undo.finish()  # the rollback's log line, outside the lock, then the effect's error
        self._announce(news)  # outside the lock, like every other path
        return receipt

    def validate_override(self, source: str, /, **values: Any) -> OverrideProposal:
        """Dry run of `override()`: every check against the would-be state; changes nothing.

        Returns a proposal that `commit()` applies if the config has not changed since.
        """
        with process.lock:
            return self._propose(source, values, layer="override", check_source=True)

    def validate_catch_up(self, source: str, /, *, generation: int, **values: Any) -> OverrideProposal:
        """Dry run of a catch-up: `values` land as one override at `generation`, not generation + 1.

        For a rank that fell behind its config group (`runtime.distributed`): the group is at
        `generation` and each value was already accepted there from its own source, so the
        caller checks allow-lists per field against those sources; names, types and
        cross-field rules are checked here as for any override. Raises ConfigError when
        `generation` is not ahead of this context.
        """
        with process.lock:
            if generation <= self.generation:
                msg = (
                    f"a catch-up to generation {generation} is not ahead of this context "
                    f"(generation {self.generation}) -- nothing to catch up"
                )
                raise ConfigError([Problem("$generation", msg)], header=f"catch-up from {source!r} rejected")
            proposal = self._propose(source, values, layer="override", check_source=False)
            snapshot = attrs.evolve(proposal.snapshot, generation=generation)
            return attrs.evolve(proposal, snapshot=snapshot, flat=FlatView(snapshot, getters_of(self.schema)))

    def commit(
        self,
        proposal: OverrideProposal,
        *,
        effect: Callable[[OverrideReceipt], Any] | None = None,
        owner: Owner | None = None,
    ) -> OverrideReceipt:
        """Apply a proposal from `validate_override()`; raises StaleProposalError if anything changed since.

        With `effect`, it runs right after the swap, under the writer lock; when it raises,
        the config rolls back as in `apply_override()` and the error propagates. With
        `owner` (an engine), the receipt is the owner's: it reverts through `owner.revert()`,
        and the context refuses any other revert of it.
        """
        with process.lock:
            receipt, news, undo = self._commit_effect_locked(proposal, effect, owner)
        if undo is not None:
            undo.finish()
        self._announce(news)
        return receipt

    def _commit_effect_locked(
        self, proposal: OverrideProposal, effect: Callable[[OverrideReceipt], Any] | None, owner: Owner | None
    ) -> tuple[OverrideReceipt, Announcement, Rollback | None]:
        before = self._state
        receipt, news = self._commit_locked(proposal, owner=owner)
        return receipt, news, self._run_effect_locked(before, proposal.source, effect, receipt)

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
        with process.lock:
            self._subscribers = (*self._subscribers, sub)
        return sub

    def _allowed_tops(self) -> frozenset[str] | tuple[str, ...]:
        if self.role_mode == "enforce":
            return self.schema.roles()[self.role]
        return self._state.snapshot.bag_names

    def _read(self, state: State, info: FieldInfo) -> None:
        # the view checks (enforce) or records (record) the namespace, as a bag read would
        getattr(state.view, self._routes[info.namespace][0])

    def __repr__(self) -> str:
        return (
            f"RuntimeContext(role={self.role!r}, generation={self.generation}, overrides={len(self.overrides_log())})"
        )


# -- publishing, creating, activating -------------------------------------------------------


def _build(record: Any, role: str, model: Any, *, owned: bool) -> RuntimeContext:
    schema = schema_of(record)
    if schema is None:
        call = "create_context()" if owned else "publish()"
        msg = (
            f"{call} takes a record of an sgconf schema (a ServerArgs), got {type(record).__name__} "
            "-- build one with sgconf.load(...) or schema.load(...), or adopt your dataclass with sgconf.from_dataclass"
        )
        raise TypeError(msg)
    record = schema.as_record(record)
    check_role(role, schema)
    mode = mode_from_env()
    resolved = resolve_once(record, model)
    return RuntimeContext(record, resolved, role=role, role_mode=mode, owned=owned)


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
    ctx = _build(record, role, model, owned=False)
    with process.lock:
        old = process.install(ctx)
    if old is not None:
        stop = _emit(
            "info",
            "config.republish",
            role=role,
            previous_role=old.role,
            previous_generation=old.generation,
            dropped_overrides=[rec.as_dict() for rec in old._state.log[-old.limit :]],
        )
        if stop is not None:
            raise stop  # the new context is live: the process is being stopped, say so
    return ctx


def create_context(record: Any, *, role: str, model: Mapping[str, Any] | Any | None = None) -> RuntimeContext:
    """A context of its own for `record`, resolved like `publish()` but not made the process's.

    For one engine among several in a process (each with its own `base_gpu_id`, page size
    or storage): it owns the context and reads it under `use_context(ctx)`. Nothing
    process-wide changes, a later `publish()` never replaces it, and its overrides reach
    only code running under it. Raises as `publish()` does.
    """
    return _build(record, role, model, owned=True)


@contextlib.contextmanager
def use_context(ctx: RuntimeContext) -> Iterator[RuntimeContext]:
    """Make `ctx` the context the accessors and `get_context()` read in this thread or task, for the block.

    Blocks nest; on exit the previous one is restored by identity, whatever happened
    inside. Threads and tasks started inside do not inherit it unless they copy the
    caller's `contextvars` context (asyncio tasks do). Accessor reads outside every
    block cost what they cost without this (see `runtime.process`).
    """
    if not isinstance(ctx, RuntimeContext):
        raise TypeError(
            f"use_context() takes a RuntimeContext, got {type(ctx).__name__} -- make one with create_context()"
        )
    token = process.active.set(ctx)
    process.enter_routing()
    try:
        yield ctx
    finally:
        process.active.reset(token)
        process.leave_routing()


def get_context() -> RuntimeContext:
    """The context in use: the calling thread's or task's `use_context()` one, else the published one.

    Raises NotPublishedError when there is neither.
    """
    ctx = process.context_in_use()
    if ctx is None:
        msg = (
            "no runtime config is published: get_context() was called before publish() -- call "
            "runtime.publish(record, role=...) at startup, or use runtime.override_server_args(...) "
            "or the server_args pytest fixture in tests"
        )
        raise NotPublishedError(msg)
    return ctx


def is_published() -> bool:
    """Whether a context is in use here: published, or active through `use_context()`."""
    return process.context_in_use() is not None


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
            Problem(
                "$record",
                "the published record differs from the one given -- pass get_server_args(), or publish() it first",
            )
        )
    if role is not None and ctx.role != role:
        problems.append(
            Problem("$role", f"published with role {ctx.role!r}, expected {role!r} -- publish with role={role!r}")
        )
    if problems:
        raise ConfigError(problems, header="runtime context does not match")
    return ctx


def withdraw(ctx: RuntimeContext) -> bool:
    """Stop publishing `ctx` if it is the published context (an engine shutting down); True when it was.

    Unlike `reset()`, nothing else of the process's state changes: logging stays as it is
    configured, open installs and role records stay.
    """
    with process.lock:
        if process.current is not ctx:
            return False
        process.install(None)
        return True


def reset() -> None:
    """Forget the published context and every other piece of process-wide config state (see `runtime.process.reset`)."""
    process.reset()


__all__ = [
    "DEFAULT_HISTORY_LIMIT",
    "RuntimeContext",
    "Scope",
    "assert_published",
    "create_context",
    "get_context",
    "get_server_args",
    "is_published",
    "publish",
    "reset",
    "use_context",
    "withdraw",
]
