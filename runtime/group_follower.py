"""The follower's half of a config group: answering rounds, voting, committing, catching up.

A mixin of `ConfigGroup` (`runtime.distributed`), which owns the board, the thread and
the coordinator's half; every method here runs on the rank that received the message.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from runtime import group_messages as wire
from runtime.errors import CommitFailed, RankDiverged, Refusal
from runtime.group_results import (
    ABORT,
    COMMIT,
    Prepared,
    PreparedEffect,
    SideEffect,
    digests,
    log,
    quietly,
    reasons_of,
    refusal_reason,
)
from runtime.overrides import inner_source, shown
from sgconf.errors import ConfigError, Problem


class Following:
    """Rank-side handling of a group's messages; `ConfigGroup` provides the board and the context."""

    rank: int
    coordinator: int
    _closed: bool
    _effects: list[SideEffect]
    _context: Callable[[], Any]

    @property
    def is_coordinator(self) -> bool:
        return self.rank == self.coordinator

    def _connect(self) -> Any:
        raise NotImplementedError

    def _listen(self) -> None:
        import torch.distributed as dist

        store = self._connect()
        while True:
            try:
                raw = store.queue_pop(f"inbox/{self.rank}", True)
            except dist.DistError:
                if not self._closed:
                    log.error("config_group.board_lost", rank=self.rank)
                return
            n = None
            try:
                message = wire.from_wire(raw, wire.StatusAsk, wire.Override, wire.CatchUp, wire.StopListening)
                if isinstance(message, wire.StopListening):
                    return
                if isinstance(message, wire.StatusAsk):
                    n = message.round
                    store.set(f"status/{n}/{self.rank}", self._state(message.fields).to_wire())
                elif isinstance(message, wire.Override):
                    n = message.round
                    self._follow(store, message)
                elif isinstance(message, wire.CatchUp):
                    n = message.round
                    store.set(f"ack/{n}/{self.rank}", self._catch_up(message).to_wire())
            except dist.DistError:
                log.error("config_group.board_lost", rank=self.rank, round=n)
                return
            except Exception as exc:  # keep listening: one bad round must not take the rank out of the group
                log.error("config_group.round_failed", rank=self.rank, round=n, error=str(exc))

    def _follow(self, store: Any, message: wire.Override) -> None:
        import torch.distributed as dist

        n, source, fields = message.round, message.source, message.fields
        generation = self._context().generation
        prepared: Prepared | None = None
        try:
            if generation != message.base_generation:
                msg = (
                    f"this rank is at generation {generation}, the coordinator at {message.base_generation} "
                    "-- the ranks diverged; resync this rank from the coordinator"
                    " (POST /replicas/<index>/resync on a data-parallel server) or publish the same config on every rank"
                )
                raise RankDiverged([Problem("$generation", msg)])
            prepared = self._prepare(source, fields)
            vote = wire.Vote(True, generation)
        except Exception as exc:  # a refusal, whatever its kind, is reported as this rank's reasons
            vote = wire.Vote(False, generation, tuple(reasons_of(exc)), refusal_reason(exc))
        store.set(f"vote/{n}/{self.rank}", vote.to_wire())
        if prepared is None:
            return
        key = f"decision/{n}"
        try:
            try:
                store.wait([key], datetime.timedelta(seconds=message.timeout_s))
            except dist.DistStoreError:
                pass  # our deadline passed; the compare-and-set below settles the round for everyone
            decision = store.compare_set(key, "", ABORT).decode()
        except dist.DistError:
            self._abort(prepared)  # the board is gone with the coordinator: release, then stop listening
            raise
        if decision == COMMIT:
            store.set(f"ack/{n}/{self.rank}", self._commit(prepared).to_wire())
        else:
            self._abort(prepared)
            store.set(f"ack/{n}/{self.rank}", wire.Aborted().to_wire())
            log.warning("config_group.aborted", round=n, source=source, rank=self.rank)

    def _catch_up(self, message: wire.CatchUp) -> wire.Ack:
        at, target = self._context().generation, message.generation
        changed = 0
        refusal: Refusal | None = None
        errors: tuple[str, ...] = ()
        try:
            if at > target:
                msg = f"this rank is at generation {at}, ahead of the coordinator at {target}"
                raise RankDiverged([Problem("$generation", msg)])
            if at < target:
                changed = self._apply_catch_up(target, message.values, message.set_by, message.sources)
        except Exception as exc:  # reported to the coordinator, which raises ResyncFailed with it
            refusal, errors = refusal_reason(exc), tuple(reasons_of(exc))
        state = self._state(())
        return wire.Ack(
            state.generation,
            state.fingerprint,
            digests=digests(self._context()),
            changed=changed,
            refusal=refusal,
            errors=errors,
        )

    def _apply_catch_up(
        self, target: int, values: Mapping[str, Any], set_by: Mapping[str, str], sources: Sequence[str]
    ) -> int:
        """Commit `values` as one override at generation `target`; returns how many fields side effects saw."""
        problems = []
        schema = self._context().schema
        for name, source in set_by.items():
            info = schema.field_info(name)
            if not info.setting.source_allowed(inner_source(source)):
                msg = f"'{name}' was set by {source!r}, which may not set it on this rank -- check its launch config"
                problems.append(Problem(info.path, msg))
        if problems:
            raise ConfigError(problems)
        label = f"config_group.resync({', '.join(sources)})"  # the original sources stay in the log entry
        # one validated override carrying every field at once (rules see them together), each field
        # already checked against its own source above; it lands at the coordinator's generation
        proposal = self._context().validate_catch_up(label, generation=target, **values)
        # side effects see only the overrides this rank lacks, each with every field its source set
        lacking = {set_by.get(c.name) for c in proposal.changes if c.old != c.new}
        needed = {name: new for name, new in proposal.values.items() if set_by.get(name) in lacking}
        ack = self._commit(Prepared(proposal, self._prepare_effects(label, needed) if needed else []))
        if ack.refusal is not None:
            raise CommitFailed("; ".join(ack.errors))
        return len(needed)

    # -- every rank ------------------------------------------------------------------

    def _prepare(self, source: str, fields: Mapping[str, Any]) -> Prepared:
        proposal = self._context().validate_override(source, **fields)
        values = getattr(proposal, "values", None) or fields
        return Prepared(proposal, self._prepare_effects(source, values))

    def _prepare_effects(self, source: str, values: Mapping[str, Any]) -> list[PreparedEffect]:
        effects: list[PreparedEffect] = []
        try:
            for effect in self._effects:
                done = effect(source, values)
                if done is not None:
                    effects.append(done)
        except BaseException:
            for done in reversed(effects):
                quietly(done.abort, "abort")
            raise
        return effects

    def _commit(self, prepared: Prepared) -> wire.Ack:
        ctx = self._context()
        errors: tuple[str, ...] = ()
        released = False

        def switch_over(_: Any) -> None:
            # the side effects go live right after the config swap; one failing rolls the config back
            nonlocal released
            released = True
            for i, done in enumerate(prepared.effects):
                try:
                    done.commit()
                except BaseException:
                    for rest in reversed(prepared.effects[i:]):
                        quietly(rest.abort, "abort")
                    raise

        try:
            ctx.commit(prepared.proposal, effect=switch_over if prepared.effects else None)
        except Exception as exc:  # kept and reported: the ranks now differ and the coordinator must say so
            errors = (f"commit failed on rank {self.rank}: {exc}",)
            log.error("config_group.commit_failed", rank=self.rank, error=str(exc))
            if not released:  # the swap itself failed: nothing went live, release everything
                for done in reversed(prepared.effects):
                    quietly(done.abort, "abort")
        state = self._state(())
        # the coordinator computes its own digests only when a rank differs
        return wire.Ack(
            state.generation,
            state.fingerprint,
            digests={} if self.is_coordinator else digests(ctx),
            refusal=Refusal.FAILED if errors else None,
            errors=errors,
        )

    def _abort(self, prepared: Prepared) -> None:
        for done in reversed(prepared.effects):
            quietly(done.abort, "abort")

    def _state(self, names: Sequence[str]) -> wire.RankReport:
        ctx = self._context()
        values = {name: shown(name, value, ctx.schema) for name, value in ctx.group_values(names).items()}
        return wire.RankReport(ctx.generation, ctx.fingerprint(), values)


__all__ = ["Following"]
