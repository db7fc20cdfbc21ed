"""The process-wide runtime context: publish once, read lock-free, override with provenance.

One owner holds the global state (`_current`, plus the view the accessors read). Readers
take no lock: the state of a context is one immutable `_State`, replaced in a single
reference assignment. Writers (publish, override, commit, scoped, restore) serialize on
one re-entrant lock. Subscribers run after the commit, outside the lock, so a slow or
failing subscriber can neither block readers nor undo a commit.
"""

from __future__ import annotations

import contextlib
import threading
import time
import types
from collections.abc import Iterable, Iterator, Mapping
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
from runtime.overrides import (
    ConfigEvent,
    FieldChange,
    OverrideProposal,
    OverrideReceipt,
    OverrideRecord,
    Subscriber,
    Subscription,
    inner_source,
    iter_changes,
    shown,
)
from runtime.roles import Mode, check_role, make_view, mode_from_env
from runtime.snapshot import Snapshot, fingerprint_of, snapshot_class
from sgconf.dump import plain
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


@attrs.frozen(slots=True, eq=False)
class _State:
    """Everything a context shows at one generation; replaced whole, never mutated."""

    snapshot: Snapshot
    view: Any
    # read-only proxies: `.copy()` of one is a C dict copy (`dict(proxy)` walks it key by key)
    flat: types.MappingProxyType[str, Any]
    # the overrides log as a persistent list, newest first: `(record, older)` pairs, so a
    # commit is O(1) however long the log grows, and older states keep their own log
    log_head: tuple[OverrideRecord, Any] | None
    log_len: int
    # field -> the override that last set it (revert checks this)
    last_set: types.MappingProxyType[str, OverrideRecord]

    def log(self) -> tuple[OverrideRecord, ...]:
        out = []
        node = self.log_head
        while node is not None:
            out.append(node[0])
            node = node[1]
        out.reverse()
        return tuple(out)


class RuntimeContext:
    """The published configuration of this process: one record, resolved once, with its overrides.

    Obtain it from `publish()` or `get_context()`. Read bags through the accessors or a
    `snapshot()`; change hot fields through `override()`.
    """

    __slots__ = ("role", "record", "resolved", "model", "role_mode", "schema", "_state", "_subscribers", "_fingerprint")

    def __init__(self, record: Any, resolved: Resolved, *, role: str, role_mode: Mode) -> None:
        self.role = role
        self.record = record
        self.resolved = resolved
        self.model: Mapping[str, Any] | None = resolved.model
        self.role_mode: Mode = role_mode
        schema = schema_of(record)
        assert schema is not None, "publish() checks the record"
        self.schema: Schema = schema  # the schema the record belongs to: names, routes, bags and roles
        snapshot = snapshot_class(schema).from_bags(0, resolved.bags())
        self._state = _State(
            snapshot=snapshot,
            view=make_view(snapshot, role, role_mode),
            flat=types.MappingProxyType(snapshot.flat()),
            log_head=None,
            log_len=0,
            last_set=types.MappingProxyType({}),
        )
        self._subscribers: tuple[Subscription, ...] = ()
        self._fingerprint: tuple[Snapshot, str] | None = None

    # -- reading -----------------------------------------------------------------------

    @property
    def generation(self) -> int:
        """0 at publish; +1 per committed override."""
        return self._state.snapshot.generation

    def snapshot(self) -> Snapshot:
        """Every bag at the current generation, immutable; read several values for one decision from it.

        When the role mode is record/enforce this is a role-checked view with the same names.
        """
        return self._state.view

    def value(self, name: str) -> Any:
        """The current value of one flat field (overrides applied); raises UnknownFieldError."""
        self.schema.field_info(name)
        return self._state.flat[name]

    def fingerprint(self) -> str:
        """Stable hex hash of the counted resolved leaves, overrides applied; cached per generation."""
        state = self._state
        cached = self._fingerprint
        if cached is not None and cached[0] is state.snapshot:
            return cached[1]
        digest = fingerprint_of(state.flat.copy(), self.schema)
        self._fingerprint = (state.snapshot, digest)
        return digest

    def resolved_dict(self, redact: bool = True) -> dict[str, Any]:
        """The resolved config with overrides applied, nested by namespace; secrets `"***"` when `redact`."""
        flat = self._state.flat
        routes = self.schema.routes()
        out: dict[str, Any] = {}
        for name, info in self.schema.fields().items():
            top, child = routes[info.namespace]
            target = out.setdefault(top, {})
            if child is not None:
                target = target.setdefault(child, {})
            value = flat[name]
            if redact:
                value = shown(name, value, self.schema)
            target[name] = plain(value)  # plain lists and objects, never the frozen ones
        return out

    def overrides_log(self) -> tuple[OverrideRecord, ...]:
        """Every committed override since publish, oldest first (scoped ones while their scope is open)."""
        return self._state.log()

    def explain(self, name: str) -> list[Origin]:
        """The provenance chain of `name`: launch layers, resolution, then each override; winner last.

        Raises UnknownFieldError (with a did-you-mean) for an undeclared name.
        """
        info = self.schema.field_info(name)
        chain = list(launch_explain(self.record, name, self.resolved))
        for rec, change in iter_changes(self._state.log(), name):
            chain.append(Origin(rec.layer, rec.source, change.new, rec.generation, rec.time, secret=info.spec.secret))
        return chain

    # -- overriding --------------------------------------------------------------------

    def override(self, source: str, /, **values: Any) -> OverrideReceipt:
        """Validate, then atomically apply `values` from `source`; all or nothing.

        Raises UnknownFieldError (unknown name), OverrideRefused (field not hot and
        `source` not on its allow-list), ConfigError (bad type, choice or cross-field
        rule), ContextReplacedError (a later publish replaced this context). A value
        equal to the current one still commits: the log records what was asked, and when.
        """
        with _lock:
            proposal = self._propose(source, values, layer="override", check_source=True)
            receipt = self._commit_locked(proposal)
        self._notify(receipt.record, receipt.snapshot)
        return receipt

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

    def commit(self, proposal: OverrideProposal) -> OverrideReceipt:
        """Apply a proposal from `validate_override()`; raises StaleProposalError if anything changed since."""
        with _lock:
            receipt = self._commit_locked(proposal)
        self._notify(receipt.record, receipt.snapshot)
        return receipt

    @contextlib.contextmanager
    def scoped(self, **values: Any) -> Iterator[Any]:
        """Override any fields (hot or not) for the `with` block, then restore this context exactly.

        For tests. Values are converted and rules checked like any override. On exit the
        state before the block comes back (bags, log, generation, subscribers), dropping
        overrides and subscriptions made inside it; the subscribers of before the block
        hear both the change and the restore.
        """
        with _lock:
            saved = self._state
            saved_subscribers = self._subscribers
            proposal = self._propose("scoped", values, layer="scoped", check_source=False)
            receipt = self._commit_locked(proposal)
        self._notify(receipt.record, receipt.snapshot)
        try:
            yield receipt.snapshot
        finally:
            with _lock:
                before = self._state
                self._swap(saved)
                self._subscribers = saved_subscribers
            back = tuple(
                FieldChange(n, before.flat[n], saved.flat[n], secret=self.schema._fields[n].spec.secret)
                for n in saved.flat
                if before.flat[n] != saved.flat[n]
            )
            if back:
                rec = OverrideRecord("scoped.restore", "scoped", saved.snapshot.generation, time.time(), back)
                self._notify(rec, saved.view)

    def subscribe(self, callback: Subscriber, fields: Iterable[str] | None = None) -> Subscription:
        """Call `callback(event)` after each commit that changes one of `fields` (any field when None).

        Callbacks run in the committing thread, after the writer lock is released, so
        with several writers events may arrive out of generation order: compare
        `event.generation`, or read `get_context().snapshot()` for the latest state.
        Raises UnknownFieldError for an undeclared field name.
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

    def subscribers(self) -> tuple[Subscription, ...]:
        return self._subscribers

    # -- internals ---------------------------------------------------------------------

    def _unsubscribe(self, sub: Subscription) -> None:
        with _lock:
            self._subscribers = tuple(s for s in self._subscribers if s is not sub)

    def _require_current(self) -> None:
        if _current is not self:
            msg = "this runtime context was replaced by a later publish() -- call get_context() for the live one"
            raise ContextReplacedError(msg)

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
            converted.update(good)
        header = f"override from {source!r} rejected, nothing changed"
        if problems:
            cls = UnknownFieldError if unknown else OverrideRefused if refused else ConfigError
            raise cls(problems, header=header)
        would = state.flat.copy()
        would.update(converted)
        broken = check_rules(would, dict.fromkeys(converted, origin), only_touching=set(converted), schema=self.schema)
        if broken:
            raise ConfigError(broken, header=header)
        changes = tuple(
            FieldChange(name, state.flat[name], new, secret=infos[name].spec.secret) for name, new in converted.items()
        )
        snapshot = _evolve(state.snapshot, converted, infos, self.schema.routes())
        return OverrideProposal(self, state, source, layer, changes, snapshot, types.MappingProxyType(would))

    def _commit_locked(self, proposal: OverrideProposal) -> OverrideReceipt:
        if proposal.context is not self:
            raise StaleProposalError([Problem("$", "this proposal was validated on another context")])
        self._require_current()
        state = self._state
        if state is not proposal.base:
            msg = (
                f"config changed since this override was validated (generation {proposal.base_generation}, "
                f"now {state.snapshot.generation}) -- validate it again"
            )
            raise StaleProposalError([Problem("$", msg)], header=f"override from {proposal.source!r} not committed")
        rec = OverrideRecord(proposal.source, proposal.layer, proposal.snapshot.generation, time.time(), proposal.changes)
        last_set = state.last_set.copy()
        last_set.update(dict.fromkeys(rec.fields, rec))
        new = _State(
            snapshot=proposal.snapshot,
            view=make_view(proposal.snapshot, self.role, self.role_mode),
            flat=proposal.flat,
            log_head=(rec, state.log_head),
            log_len=state.log_len + 1,
            last_set=types.MappingProxyType(last_set),
        )
        self._swap(new)
        log.info(
            "config.override",
            source=rec.source,
            layer=rec.layer,
            generation=rec.generation,
            fields={c.name: c.redacted() for c in rec.changes},
        )
        return OverrideReceipt(self, rec, new.view)

    def _swap(self, state: _State) -> None:
        # one reference assignment each: readers see the old state or the new, never a mix
        self._state = state
        if _current is self:
            accessors._set_view(state.view)

    def _notify(self, record: OverrideRecord, snapshot: Any) -> None:
        event = ConfigEvent(record, snapshot)
        changed = record.fields
        for sub in self._subscribers:
            if not sub.wants(changed):
                continue
            try:
                sub.callback(event)
            except Exception as exc:  # a subscriber must not undo a commit or starve the others
                log.error(
                    "config.subscriber_failed",
                    subscriber=getattr(sub.callback, "__qualname__", repr(sub.callback)),
                    source=record.source,
                    generation=record.generation,
                    error=f"{type(exc).__name__}: {exc}",
                    exc_info=True,
                )

    def _revert(self, receipt: OverrideReceipt) -> OverrideReceipt:
        source = f"revert:{receipt.source}"
        with _lock:
            self._require_current()
            state = self._state
            problems = []
            for change in receipt.changes:
                last = state.last_set.get(change.name)
                if last is receipt.record:
                    continue
                info = self.schema.field_info(change.name)
                if last is None or receipt.record not in state.log():
                    why = "that override is no longer applied (a scope or restore dropped it)"
                else:
                    why = f"changed since by {last.source!r} at generation {last.generation}"
                msg = (
                    f"cannot revert '{change.name}' to {shown(change.name, change.old, self.schema)!r}: {why} "
                    "-- revert the later override first, or override the field directly"
                )
                problems.append(Problem(info.path, msg, f"from override {receipt.source}"))
            if problems:
                header = f"revert of override from {receipt.source!r} (generation {receipt.generation}) refused"
                raise RevertConflict(problems, header=header)
            proposal = self._propose(source, {c.name: c.old for c in receipt.changes}, layer="override", check_source=True)
            new = self._commit_locked(proposal)
        self._notify(new.record, new.snapshot)
        return new

    def __repr__(self) -> str:
        return f"RuntimeContext(role={self.role!r}, generation={self.generation}, overrides={self._state.log_len})"


def _refusal(info: FieldInfo, raw: Any, source: str) -> str:
    allowed = info.spec.allow_sources
    hint = (
        f"set {info.flag} at launch, or override from one of: {', '.join(allowed)}"
        if allowed
        else f"set {info.flag} at launch"
    )
    return (
        f"'{info.name}' is not hot and source {source!r} is not on its allow-list "
        f"(got {'***' if info.spec.secret and raw is not None else raw!r}) -- {hint}"
    )


def _evolve(
    snapshot: Snapshot,
    values: Mapping[str, Any],
    infos: Mapping[str, FieldInfo],
    routes: Mapping[str, tuple[str, str | None]],
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
            tops[top] = attrs.evolve(bag, **changed)
        else:
            tops[top] = attrs.evolve(bag, **{child: attrs.evolve(getattr(bag, child), **changed)})
    return attrs.evolve(snapshot, generation=snapshot.generation + 1, **tops)  # type: ignore[misc]


# -- the process-wide owner ----------------------------------------------------------------


def publish(record: Any, *, role: str, model: Mapping[str, Any] | Any | None = None) -> RuntimeContext:
    """Resolve `record` once and make it the live config of this process, generation 0.

    `model` is the HF-style config mapping handed to `resolve_once` (None: read from
    model_path). `record` is a record of any frozen schema, or an instance of a dataclass
    adopted with `sgconf.from_dataclass` (converted and checked first). Re-publishing
    replaces everything (last publish wins) and logs `config.republish` with the overrides
    it dropped. Raises ConfigError for an unknown role, a bad value in an adopted instance
    or a bad `SGCONF_ROLE_NAMESPACES`, ResolutionError when resolution fails, TypeError
    for anything else; on any error the previous context stays live.
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
        log.info(
            "config.republish",
            role=role,
            previous_role=old.role,
            previous_generation=old.generation,
            dropped_overrides=[rec.as_dict() for rec in old.overrides_log()],
        )
    return ctx


def _install(ctx: RuntimeContext | None) -> RuntimeContext | None:
    """Make `ctx` live (None: nothing published); returns the one it replaced. Caller holds the lock."""
    global _current
    old = _current
    _current = ctx
    accessors._set_view(accessors.UNPUBLISHED if ctx is None else ctx._state.view)
    return old


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
    from runtime import testing

    with _lock:
        _install(None)
        testing._forget_installs()


__all__ = [
    "RuntimeContext",
    "assert_published",
    "get_context",
    "get_server_args",
    "is_published",
    "publish",
    "reset",
]
