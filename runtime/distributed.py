"""Propagate a post-publish override to every rank of a group: all ranks change, or none.

`ConfigGroup.propagate(source, **fields)` runs a two-phase commit. The coordinator (rank 0 of the group by default)
validates first, so input every rank would refuse never leaves it, then posts the proposal with its base generation;
every rank checks that it is at that generation, validates the proposal against its own context without applying it
(`validate_override`) and prepares the side effects that go with it (a storage attach), then votes yes or no with its
reasons. Only when every rank voted yes do all ranks commit, ending at the same generation; otherwise every rank that
prepared something releases it and the caller gets one `PropagationFailed` naming each refusing rank and its reasons,
and each rank that stayed silent. Each refusal also carries one typed reason (`refusal_reason`: an exception's own, or
`invalid`, `not_hot`, `diverged`, `failed`), so a caller decides from it, never from the text. Either way the call
returns only once every rank that answered has finished the round.

Why a vote board on a `TCPStore` and not gloo collectives. A collective needs every rank inside the same call at once:
a follower would have to sit in a `broadcast` waiting for the next proposal, and gloo's timeout is fixed when the
group is built, so an idle follower would time out while nothing is wrong, and after a timeout the gloo group is no
longer usable. A dead rank would also hang every collective it belongs to. The board instead gives each follower an
inbox queue it blocks on for as long as it likes (the blocking call releases the GIL), and gives the coordinator
per-key waits with a deadline, so a silent rank costs the others exactly the configured timeout and is then named. The
decision of a round is one key written with compare-and-set: the coordinator sets it to commit or abort, and a
follower whose own deadline passes without a decision sets it to abort. Whoever writes first wins and everyone reads
the same answer, so a late commit can never meet an early abort and no rank ever commits alone. The torch.distributed
process group is used once, at construction, to broadcast the board's address from the coordinator; pass a gloo group
(`_dist().new_group(backend="gloo")` beside NCCL on GPU machines).

After each commit every rank posts its generation, fingerprint and per-field digests (an all-gather over the board,
bounded by the same deadline); a fingerprint that differs from the coordinator's is logged as an error with the
differing fields and kept in `status()` for `/server_info`.

A rank that died stays silent, so every later round fails (naming it) until it is replaced: all or nothing holds for
the whole group, not for the ranks that happen to be up. The replacement joins with the board's `address` instead of
the broadcast, the coordinator discards what was queued for the dead rank (`clear_inbox`) and then brings it up to
date (`resync`) in one catch-up round: the current value of every field overridden since publish, each with the source
that last set it, read from the coordinator's live config. The replacement starts from the same launch config, so
those values take it to the coordinator's fingerprint; it commits them as one override at the coordinator's
generation, and its side effects prepare what the changed fields need (the attached storage backend). A live rank left
behind (its commit failed) catches up the same way.

Limits: the board lives in the coordinator's process, so if the coordinator dies between writing a commit and a
follower reading it, that follower cannot tell; it releases what it prepared, logs `config_group.board_lost` and stops
taking part. The coordinator keeps no history for `resync`: a catch-up round is as large as the set of fields
overridden since publish, however many rounds committed them.

The board stays the same size however many rounds run: the coordinator deletes each round's keys once every rank that
may read them has (a vote and a status reply once gathered; the decision once every rank that voted yes acknowledged
it). A key a slow rank writes after its deadline is remembered and deleted at a later round; after `_STALE_ROUNDS`
rounds without it the coordinator stops looking (a rank that slow and then refusing leaves one key behind).
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import attrs

from runtime.errors import (
    CoordinatorOnly,
    GroupMessageError,
    GroupSetupError,
    PropagationFailed,
    RanksSilent,
    Refusal,
    ResyncFailed,
)
from runtime.group_follower import Following
from runtime.group_messages import (
    Aborted,
    Ack,
    CatchUp,
    Override,
    RankReport,
    StatusAsk,
    StopListening,
    Vote,
    from_wire,
    unsendable,
)
from runtime.group_results import (
    ABORT,
    COMMIT,
    PREFIX,
    Mismatch,
    PreparedEffect,
    Propagated,
    RankState,
    SideEffect,
    default_host,
    digests,
    log,
    quietly,
    reasons_of,
    refusal_reason,
)
from sgconf.dump import json_type
from sgconf.frozen import thaw

_FOREVER = datetime.timedelta(days=365)
_HOST_BYTES = 255
_CLOSE_TIMEOUT = datetime.timedelta(seconds=5)
_STALE_ROUNDS = 64  # how long a key a late rank may still write is looked for
DEFAULT_SYNC_TIMEOUT_S = 30.0
R = TypeVar("R")


class ConfigGroup(Following):
    """One rank's membership in a group whose post-publish overrides are applied everywhere or nowhere.

    Construct it on every rank at once (it broadcasts the board's address over
    `process_group`, a collective), then call `start()` on followers so they answer
    rounds in a background thread. Only the coordinator may `propagate` and ask for
    `ranks()`. `context` is a callable returning the rank's runtime context (default:
    `runtime.context.get_context`, looked up on each round so a re-publish is seen).
    `timeout_s` bounds how long a round waits for any rank; None reads
    the field the context's schema names as its `sync_timeout` knob when a round starts
    (30 s when it names none). A follower that
    replaces a dead rank passes the coordinator's `address` instead (no collective),
    and the coordinator then calls `clear_inbox` and `resync` for it.
    """

    def __init__(
        self,
        process_group: Any,
        rank: int,
        world_size: int,
        timeout_s: float | None = None,
        *,
        context: Callable[[], Any] | None = None,
        coordinator: int = 0,
        bind_host: str | None = None,
        address: tuple[str, int] | None = None,
    ) -> None:
        if not 0 <= rank < world_size or not 0 <= coordinator < world_size:
            msg = f"rank {rank} and coordinator {coordinator} must be in [0, {world_size}) -- pass the group's own rank"
            raise GroupSetupError(msg)
        self.rank = rank
        self.world_size = world_size
        self.coordinator = coordinator
        self._timeout_s = timeout_s
        self._context = context or _runtime_context
        self._effects: list[SideEffect] = []
        self._lock = threading.Lock()
        self._round = 0
        # keys a late rank may still write (or read): key -> (round, keys that must exist first)
        self._stale: dict[str, tuple[int, tuple[str, ...]]] = {}
        self._mismatch: Mismatch | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self._server: Any = None
        self.address: tuple[str, int]
        if address is not None:
            if rank == coordinator:
                raise GroupSetupError(
                    f"the coordinator (rank {rank}) owns the board -- pass address= only to a joining follower"
                )
            self.address = address
        elif rank == coordinator:
            bind = bind_host or default_host()
            self._server = _dist().TCPStore(bind, 0, world_size, True, timeout=_FOREVER, wait_for_workers=False)
            self.address = (bind, self._server.port)
        else:
            self.address = ("", 0)
        if world_size > 1 and address is None:
            self.address = _broadcast_address(self.address, process_group, coordinator)
        self._store = self._connect()

    # -- public API ----------------------------------------------------------------

    @property
    def is_coordinator(self) -> bool:
        return self.rank == self.coordinator

    def add_effect(self, effect: SideEffect) -> None:
        """Register a side effect prepared with every override on this rank (see `SideEffect`)."""
        self._effects.append(effect)

    def timeout_s(self) -> float:
        """The vote timeout a round started now would use."""
        if self._timeout_s is not None:
            return self._timeout_s
        ctx = self._context()
        name = ctx.schema.knob("sync_timeout")
        return float(ctx.value(name)) if name is not None else DEFAULT_SYNC_TIMEOUT_S

    def start(self) -> None:
        """Start answering rounds in a daemon thread (followers only; a no-op on the coordinator)."""
        if self.is_coordinator or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._listen, name=f"config-group-rank{self.rank}", daemon=True)
        self._thread.start()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for a follower's listener to end (the coordinator closed the group); True when it has."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def propagate(self, source: str, **fields: Any) -> Propagated:
        """Apply `fields` as an override from `source` on every rank, or on none.

        Raises PropagationFailed (every refusing rank with its reasons) or RanksSilent
        (some rank did not answer within the timeout); nothing changed on any rank then.
        Values travel as JSON and are structured by each rank's own converter.
        """
        self._require_coordinator("propagate")
        timeout_s = _round_timeout(self.timeout_s(), fields, self._context().schema.knob("sync_timeout"))
        with self._lock:
            self._next_round()
            return self._coordinate(self._round, source, dict(fields), timeout_s)

    def ranks(self, *fields: str, timeout_s: float | None = None) -> tuple[RankState, ...]:
        """Every rank's generation and fingerprint now (plus the named fields' values); silent ranks marked."""
        self._require_coordinator("ranks")
        timeout_s = self.timeout_s() if timeout_s is None else timeout_s
        schema = self._context().schema
        for name in fields:
            schema.field_info(name)  # an unknown name fails here, before any rank is asked
        with self._lock:
            n = self._next_round()
            ask = StatusAsk(n, tuple(fields)).to_wire()
            for rank in self._followers():
                self._send(rank, ask)
            own = self._state(fields)
            replies: dict[int, RankReport] = {}
            try:  # an unreadable reply counts as silence here; the keys read are deleted whatever happens
                replies = self._gather(f"status/{n}", self._followers(), time.monotonic() + timeout_s, RankReport)
            finally:
                self._release(n, f"status/{n}", self._followers(), replies)
        states = [RankState(self.rank, True, own.generation, own.fingerprint, own.values)]
        for rank in self._followers():
            reply = replies.get(rank)
            if reply is None:
                states.append(RankState(rank, False))
            else:
                states.append(RankState(rank, True, reply.generation, reply.fingerprint, reply.values))
        return tuple(sorted(states, key=lambda s: s.rank))

    def clear_inbox(self, rank: int) -> int:
        """Discard what was queued for `rank` (a dead rank, before its replacement joins); returns how many."""
        self._require_coordinator("clear_inbox")
        self._require_follower(rank)
        key = f"inbox/{rank}"
        dropped = 0
        with self._lock:
            while self._store.queue_len(key):
                self._store.queue_pop(key, False)
                dropped += 1
        return dropped

    def catch_up(self) -> CatchUp:
        """What `resync` sends (its `round` left 0): our generation and the current value of each field overridden since publish.

        `values` maps each such field to its value now (as a config file spells it), `set_by` to the source of the
        override that last set it, and `sources` lists those sources in the order they
        last acted. Its size depends on the fields, not on how many rounds set them.
        """
        self._require_coordinator("catch_up")
        ctx = self._context()
        set_by: dict[str, str] = {}
        for rec in ctx.overrides_log():
            for name in rec.fields:
                set_by.pop(name, None)  # re-inserted: the order is that of the last change
                set_by[name] = rec.source
        sources = tuple(dict.fromkeys(reversed(set_by.values())))[::-1]
        # each value as a config file spells it (a duration `1h30m`, a path its text): what the
        # rank converts back to the same value, and what JSON can carry
        values = {name: thaw(value) for name, value in ctx.group_values(set_by).items()}
        return CatchUp(0, ctx.generation, values, set_by, sources)

    def resync(self, rank: int, *, timeout_s: float | None = None) -> RankState:
        """Bring `rank` (a replacement, or a rank left behind) to our generation and fingerprint in one round.

        The rank checks each field of `catch_up()` against the source that set it here,
        prepares its side effects for the overrides it lacks, and commits the values as
        one override at our generation. Returns its state, equal to the coordinator's;
        raises ResyncFailed (with the rank's reason, or its silence) when it could not
        get there. No round runs meanwhile.
        """
        self._require_coordinator("resync")
        self._require_follower(rank)
        timeout_s = self.timeout_s() if timeout_s is None else timeout_s
        with self._lock:
            n = self._next_round()
            own = self._state(())
            self._send(rank, self._catch_up_payload(rank, n, own.generation))
            reply: dict[int, Ack] = {}
            try:
                reply = self._gather(f"ack/{n}", [rank], time.monotonic() + timeout_s, Ack, unreadable=Ack.unreadable)
            finally:
                self._release(n, f"ack/{n}", [rank], reply)
        ack = reply.get(rank)
        if not isinstance(ack, Ack):
            raise ResyncFailed(rank, own.generation, [f"did not answer within {timeout_s:g}s"])
        if ack.refusal is not None:
            raise ResyncFailed(rank, own.generation, ack.errors, reason=ack.refusal)
        if (ack.generation, ack.fingerprint) != (own.generation, own.fingerprint):
            mine = digests(self._context())
            differing = sorted(k for k in mine if ack.digests.get(k) != mine[k])
            reason = (
                f"it reached generation {ack.generation} with a different fingerprint"
                f" (fields differing: {', '.join(differing) or 'none'}); its launch config or our history differ"
            )
            raise ResyncFailed(rank, own.generation, [reason], reason=Refusal.DIVERGED)
        log.info("config_group.resynced", rank=rank, generation=ack.generation, fields=ack.changed)
        return RankState(rank, True, ack.generation, ack.fingerprint)

    def _catch_up_payload(self, rank: int, n: int, generation: int) -> str:
        """The catch-up's wire text, strictly: a value JSON cannot carry would reach the rank as its repr."""
        message = attrs.evolve(self.catch_up(), round=n)
        try:
            return message.to_wire(strict=True)
        except (TypeError, ValueError):
            reasons = [
                f"'{name}' holds a {json_type(message.values[name])} value, which cannot travel to the rank as JSON"
                f" -- set '{name}' to a value of its declared type (set by {message.set_by.get(name)!r})"
                for name in unsendable(message.values)
            ]
            raise ResyncFailed(rank, generation, reasons or ["the catch-up cannot travel as JSON"]) from None

    def status(self) -> dict[str, Any]:
        """This rank's view for `/server_info`: rank, world size, last fingerprint mismatch (or None)."""
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "coordinator": self.coordinator,
            "fingerprint_mismatch": self._mismatch.to_dict() if self._mismatch else None,
        }

    def close(self) -> None:
        """Stop taking part: the coordinator tells every follower to stop; a follower stops its listener."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.is_coordinator:
                with self._lock:
                    for rank in self._followers():
                        self._send(rank, StopListening().to_wire())
            elif self._thread is not None and self._thread.is_alive():
                # The listener's own connection is blocked in its inbox; wake it through a second one
                # (a short connect timeout: the board may be gone with the coordinator).
                self._connect(_CLOSE_TIMEOUT).queue_push(f"inbox/{self.rank}", StopListening().to_wire())
                self._thread.join(_CLOSE_TIMEOUT.total_seconds())
        except _dist().DistError:
            log.warning("config_group.close_unreachable", rank=self.rank)

    # -- coordinator -----------------------------------------------------------------

    def _coordinate(self, n: int, source: str, fields: dict[str, Any], timeout_s: float) -> Propagated:
        ctx = self._context()
        message = Override(n, source, fields, ctx.generation, timeout_s)
        payload = message.to_wire(strict=True)  # before anything is sent: a value JSON cannot carry refuses the round
        try:
            # the coordinator checks first: input every rank would refuse never reaches the others
            prepared = self._prepare(source, fields)
        except Exception as exc:
            log.warning("config_group.aborted", round=n, source=source, fields=sorted(fields), refused=[self.rank])
            raise PropagationFailed(
                source, {self.rank: reasons_of(exc)}, timeout_s=timeout_s, reasons={self.rank: refusal_reason(exc)}
            ) from None
        try:
            deadline = time.monotonic() + timeout_s
            for rank in self._followers():
                self._send(rank, payload)
            votes = self._gather(f"vote/{n}", self._followers(), deadline, Vote, unreadable=Vote.unreadable)
            self._release(n, f"vote/{n}", self._followers(), votes)
            silent = [r for r in self._followers() if r not in votes]
            refusals = {rank: vote.reasons for rank, vote in votes.items() if not vote.ok}
            reasons = {rank: vote.reason or Refusal.FAILED for rank, vote in votes.items() if not vote.ok}
            wanted = COMMIT if not refusals and not silent else ABORT
            decision = self._decide(n, wanted)
        except BaseException:
            quietly(lambda: self._decide(n, ABORT), "abort")
            self._abort(prepared)
            # who voted is unknown here: every follower may still write its vote, read the decision and ack
            for rank in self._followers():
                self._stale.setdefault(f"vote/{n}/{rank}", (n, ()))
            self._forget_decision(n, self._followers(), {})
            raise
        if decision != COMMIT:
            self._abort(prepared)
            # wait (bounded) until the ranks that prepared have released: when this raises, the round is over
            ready = [rank for rank, vote in votes.items() if vote.ok]
            acked: dict[int, Aborted | Ack] = {}
            try:
                acked = self._gather(
                    f"ack/{n}", ready, time.monotonic() + timeout_s, Aborted, Ack, unreadable=Ack.unreadable
                )
            finally:
                self._forget_decision(n, [*ready, *silent], acked)
            late = wanted == COMMIT  # every rank voted yes, but one's deadline passed before the decision
            log.warning(
                "config_group.aborted",
                round=n,
                source=source,
                fields=sorted(fields),
                refused=sorted(refusals),
                silent=silent,
            )
            error = RanksSilent if silent or late else PropagationFailed
            raise error(source, refusals, silent, timeout_s=timeout_s, late=late, reasons=reasons)
        own = self._commit(prepared)
        # the change is live from here on: whatever the acks say, the round's keys are cleaned and it answers Propagated
        acks: dict[int, Ack] = {}
        try:
            acks = self._gather(
                f"ack/{n}", self._followers(), time.monotonic() + timeout_s, Ack, unreadable=Ack.unreadable
            )
        finally:
            self._forget_decision(n, self._followers(), acks)
        return self._compare(n, source, fields, own, acks)

    def _decide(self, n: int, wanted: str) -> str:
        return self._store.compare_set(f"decision/{n}", "", wanted).decode()

    def _compare(self, n: int, source: str, fields: Mapping[str, Any], own: Ack, acks: Mapping[int, Ack]) -> Propagated:
        states = [RankState(self.rank, True, own.generation, own.fingerprint)]
        differing: set[str] = set()
        bad: list[int] = []
        mine: dict[str, str] | None = None  # our per-field digests, computed only when a rank differs
        for rank in self._followers():
            ack = acks.get(rank)
            if ack is None:
                states.append(RankState(rank, False))
                bad.append(rank)
                continue
            if not ack.fingerprint:  # its ack could not be read (`Ack.unreadable`): it answered, its state is unknown
                states.append(RankState(rank, True))
                bad.append(rank)
                continue
            states.append(RankState(rank, True, ack.generation, ack.fingerprint))
            if (ack.fingerprint, ack.generation) != (own.fingerprint, own.generation) or ack.refusal is not None:
                bad.append(rank)
                mine = mine or digests(self._context())
                theirs = ack.digests
                differing.update(k for k in {*theirs, *mine} if theirs.get(k) != mine.get(k))
        mismatch = None
        if bad:
            mismatch = Mismatch(n, source, tuple(bad), tuple(sorted(differing)))
            self._mismatch = mismatch
            log.error(
                "config_group.fingerprint_mismatch",
                round=n,
                source=source,
                ranks=list(bad),
                fields=sorted(differing),
                errors={r: list(acks[r].errors) for r in bad if r in acks and acks[r].errors},
            )
        else:
            self._mismatch = None
        log.info("config_group.committed", round=n, source=source, fields=sorted(fields), generation=own.generation)
        return Propagated(n, source, tuple(sorted(fields)), own.generation, tuple(states), mismatch)

    # -- board plumbing --------------------------------------------------------------

    def _connect(self, connect_timeout: datetime.timedelta = datetime.timedelta(seconds=60)) -> Any:
        board_host, board_port = self.address
        store = _dist().TCPStore(board_host, board_port, self.world_size, False, timeout=connect_timeout)
        store.set_timeout(_FOREVER)  # every wait on the board passes its own deadline
        return _dist().PrefixStore(f"{PREFIX}{board_port}/", store)

    def _next_round(self) -> int:
        """Start a round (caller holds the lock): first delete what late ranks wrote since."""
        if self._stale:
            self._sweep()
        self._round += 1
        return self._round

    def _release(self, n: int, prefix: str, ranks: Sequence[int], got: Mapping[int, Any]) -> None:
        """Delete `prefix/<rank>` for the ranks that answered; remember the others' for a later sweep."""
        for rank in ranks:
            key = f"{prefix}/{rank}"
            if rank in got:
                self._store.delete_key(key)
            else:
                self._stale[key] = (n, ())

    def _forget_decision(self, n: int, readers: Sequence[int], acked: Mapping[int, Any]) -> None:
        """Delete round `n`'s decision and acks once every rank that may read the decision has acked."""
        self._release(n, f"ack/{n}", readers, acked)
        missing = tuple(f"ack/{n}/{rank}" for rank in readers if rank not in acked)
        if missing:
            # a rank still waiting would read a deleted decision as a missing one and abort alone
            self._stale[f"decision/{n}"] = (n, missing)
        else:
            self._store.delete_key(f"decision/{n}")

    def _sweep(self) -> None:
        # guarded keys first: their guards are themselves stale keys this sweep deletes
        for key, (n, guards) in sorted(self._stale.items(), key=lambda item: not item[1][1]):
            if guards and not self._store.check(list(guards)):
                if self._round - n > _STALE_ROUNDS:
                    del self._stale[key]
                continue
            if self._store.delete_key(key) or guards or self._round - n > _STALE_ROUNDS:
                del self._stale[key]

    def _followers(self) -> list[int]:
        return [r for r in range(self.world_size) if r != self.coordinator]

    def _send(self, rank: int, payload: str) -> None:
        """Queue one message (`to_wire`'s text, made once for every rank) in `rank`'s inbox."""
        self._store.queue_push(f"inbox/{rank}", payload)

    def _gather(
        self,
        prefix: str,
        ranks: Sequence[int],
        deadline: float,
        *expected: type[R],
        unreadable: Callable[[str], R] | None = None,
    ) -> dict[int, R]:
        """Read `prefix/<rank>` for each rank as one of `expected`, waiting until `deadline` at most.

        Missing ranks are left out. A reply that cannot be read (`GroupMessageError`) is logged and is
        that rank's failure: `unreadable(error)` its answer (else left out), so one bad reply never ends
        the round early and the caller's cleanup and answer cover every rank.
        """
        out: dict[int, R] = {}
        for rank in ranks:
            key = f"{prefix}/{rank}"
            remaining = deadline - time.monotonic()
            if remaining > 0:
                try:
                    self._store.wait([key], datetime.timedelta(seconds=remaining))
                except _dist().DistStoreError:
                    continue
            elif not self._store.check([key]):
                continue
            try:
                out[rank] = from_wire(self._store.get(key), *expected)
            except GroupMessageError as exc:
                log.error("config_group.unreadable_reply", rank=rank, key=key, error=str(exc))
                if unreadable is not None:
                    out[rank] = unreadable(f"its reply could not be read: {exc}")
        return out

    def _require_follower(self, rank: int) -> None:
        if rank == self.coordinator or not 0 <= rank < self.world_size:
            msg = f"rank {rank} is not a follower of this group -- pick one of {self._followers()}"
            raise GroupSetupError(msg)

    def _require_coordinator(self, what: str) -> None:
        if not self.is_coordinator:
            msg = f"{what} is only available on the coordinator (rank {self.coordinator}), not rank {self.rank}"
            raise CoordinatorOnly(msg)


def _broadcast_address(address: tuple[str, int], process_group: Any, coordinator: int) -> tuple[str, int]:
    # a plain int64 tensor, not broadcast_object_list: that needs numpy, which a CPU install may lack
    board_host, board_port = address
    data = board_host.encode()
    if len(data) > _HOST_BYTES:
        raise GroupSetupError(
            f"board host name {board_host!r} is longer than {_HOST_BYTES} bytes -- pass bind_host= an address"
        )
    import torch

    tensor = torch.zeros(2 + _HOST_BYTES, dtype=torch.int64)
    tensor[0], tensor[1] = board_port, len(data)
    tensor[2 : 2 + len(data)] = torch.tensor(list(data), dtype=torch.int64)
    _dist().broadcast(tensor, group=process_group, group_src=coordinator)
    size = int(tensor[1])
    return bytes(tensor[2 : 2 + size].tolist()).decode(), int(tensor[0])


def _dist() -> Any:
    """torch.distributed, imported where a group is used: importing this module costs no torch."""
    import torch.distributed

    return torch.distributed


def _round_timeout(current: float, fields: Mapping[str, Any], timeout_field: str | None) -> float:
    """The vote timeout of a round: a round that changes the timeout itself waits the longer of old and new.

    So a group whose timeout proved too short can always be given a longer one: the
    round that raises it already waits that long.
    """
    proposed = fields.get(timeout_field) if timeout_field is not None else None
    try:
        wanted = float(proposed) if proposed is not None and not isinstance(proposed, bool) else current
    except (TypeError, ValueError):  # refused by validation; the round runs with the current timeout
        return current
    return max(current, wanted) if wanted == wanted and wanted < float("inf") else current


def _runtime_context() -> Any:
    from runtime.context import get_context

    return get_context()


__all__ = ["DEFAULT_SYNC_TIMEOUT_S", "ConfigGroup", "PreparedEffect", "Propagated", "SideEffect"]
