"""Every message between the data-parallel controller and a replica, over the replica's pipe.

Each is a frozen attrs class, pickled by the pipe; the controller and the replicas
build and match these classes only, never tagged tuples or text. A request that fails
on a replica comes back as `Failed` with its `FailureKind`, which names the engine
exception the controller raises in its place (`FAILURES`), so a client of the group
gets the answer one engine would give.

Controller to replica: `Generate` (one request; with `stream` the replica sends a
`Chunk` as each piece fills, then the `Result`), `FlushCache`, `Cancel`, `Stop`.
Replica to controller: `Ready` once, a `Heartbeat` every heartbeat interval, and per
request `Chunk`s, then one `Result` or `Failed`. A `Failed` carries the failure's data
too (a bad request's problems, a busy engine's Retry-After), so the group's answer has
the status, body and headers one engine's has.

A replica on another node (`engine.dp.nodes`) talks over a TCP link instead of a pipe,
with the same messages, and opens it with `Join`; the controller answers `Welcome` (with
the config board's address when the group formed already, so the replica rejoins and
catches up) or `Refused`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from engine.errors import (
    DeadlineExceeded,
    DrainTimeout,
    EngineBusy,
    EngineError,
    EngineStopped,
    GenerationError,
    InvalidRequest,
    OwnDeadlineExceeded,
    ReplicaFailed,
    RequestCancelled,
    RequestRejected,
)
from engine.request_params import RequestOptions, SamplingParams, prompt_of, submit_args
from engine.request_units import unit_items, unit_options
from sgconf.errors import ConfigError, Problem

# -- controller to replica ---------------------------------------------------------------


@attrs.frozen(slots=True)
class Ask:
    """One engine request, checked: its prompt, the request model's sampling, its deadline, how its text is tokenized.

    Built on the controller by the one request model (`asks`), so a bad parameter is
    refused there exactly as one engine refuses it, and the replica submits what it is
    given without reading names out of a dict.
    """

    prompt: str | tuple[int, ...]
    sampling: SamplingParams
    timeout_s: float | None = None
    add_special_tokens: bool = True


def asks(argss: Sequence[Mapping[str, Any]]) -> tuple[Ask, ...]:
    """The `Ask` of each `Engine.generate`-style argument set (what a route hands a backend); raises InvalidRequest.

    Checked exactly as one engine checks them, by the same functions: one request as
    `Engine.submit` (`submit_args`), a unit as `submit_unit` (`unit_items`, and
    `unit_options`: the first item's say for all), each prompt by `prompt_of`, so a
    group and one engine refuse the same request in the same words.
    """
    if len(argss) == 1:
        (args,) = argss
        sampling, options = submit_args({k: v for k, v in args.items() if k != "prompt_or_ids"})
        return (Ask(prompt_of(args["prompt_or_ids"]), sampling, options.timeout_s, options.add_special_tokens),)
    items = unit_items(argss)
    options = unit_options(argss)
    return tuple(Ask(prompt_of(p), s, options.timeout_s, options.add_special_tokens) for p, s in items)


@attrs.frozen(slots=True)
class Generate:
    """Run one request; stream its pieces as `Chunk`s when `stream`."""

    rid: int
    ask: Ask
    stream: bool = False


@attrs.frozen(slots=True)
class GenerateUnit:
    """Run one unit of work (a batch, or the n choices of a prompt) as one, as `Engine.submit_batch` does.

    Answered with one `Result` whose body holds each item's `/generate` body under
    `items`, in order; one `Cancel(rid)` takes every item out. Sent whole to one
    replica, so its scheduler shares rows between units there exactly as one engine does.
    The items of one route share their deadline and tokenization: the first item's say.
    """

    rid: int
    items: tuple[Ask, ...]

    @property
    def options(self) -> RequestOptions:
        """The unit's deadline and tokenization, by the rule one engine applies (`unit_options`: the first item's)."""
        return unit_options(
            [{"timeout_s": a.timeout_s, "add_special_tokens": a.add_special_tokens} for a in self.items[:1]]
        )


@attrs.frozen(slots=True)
class FlushCache:
    """Empty the replica's prefix cache; answered with a `Result` or `Failed(kind=busy)`."""

    rid: int


@attrs.frozen(slots=True)
class Cancel:
    """The client of request `rid` went away: take it out at the next step and free its KV; no answer is sent."""

    rid: int


@attrs.frozen(slots=True)
class Stop:
    """Leave the serve loop and shut the engine down."""


@attrs.frozen(slots=True)
class Welcome:
    """The answer to `Join`: take part; `board` is None at the group's first forming, else the config board to rejoin.

    `record` is node 0's launch record, which the replica runs: one group, one config,
    whatever else the other nodes were started with.
    """

    board: tuple[str, int] | None
    record: Any = None


class JoinRefusal(str, enum.Enum):
    """Why the controller did not take a joining replica."""

    def __str__(self) -> str:  # the value, as it travels and is logged
        return str(self.value)

    LAYOUT = "layout"  # the node was started with another --dp-size or --nnodes
    NOT_REMOTE = "not_remote"  # the index is not one another node runs
    DUPLICATE = "duplicate"  # that replica joined already
    FORMED = "formed"  # the group formed without it: its node restarts to rejoin
    CONNECTED = "connected"  # the replica it would replace is still connected
    STOPPING = "stopping"  # the server is stopping


@attrs.frozen(slots=True)
class Refused:
    """The answer to `Join` when the controller cannot take this replica; it exits, saying `message`."""

    reason: JoinRefusal
    message: str


# -- replica to controller ---------------------------------------------------------------


@attrs.frozen(slots=True)
class Join:
    """The first message on a node link: which replica this is, so the controller knows the slot it fills."""

    index: int
    pid: int
    node: int
    dp_size: int  # the joining node's layout, which must be the group's
    nnodes: int


@attrs.frozen(slots=True)
class Ready:
    """The replica built its engine and joined the groups."""

    rank: int
    pid: int
    vocab_size: int | None = None  # the model's, for the controller's edge to refuse token ids outside it


@attrs.frozen(slots=True)
class Heartbeat:
    """Progress and load, every `replica_heartbeat_interval_s`: liveness, routing and `/metrics` read it."""

    seq: int
    progress: int  # finished scheduler steps
    queued: int
    running: int
    storage_degraded: bool = False
    token_usage: float | None = None
    cache_hit_rate: float | None = None

    @property
    def busy(self) -> int:
        return self.queued + self.running


@attrs.frozen(slots=True)
class Chunk:
    """The next piece of a streamed request: its text and token ids."""

    rid: int
    text: str
    token_ids: tuple[int, ...]


@attrs.frozen(slots=True)
class Result:
    """The answer of a request: the `/generate` body (or a flush's row)."""

    rid: int
    body: dict[str, Any]


class FailureKind(str, enum.Enum):
    """Why a request failed on a replica; names the exception the controller raises (`FAILURES`)."""

    def __str__(self) -> str:  # the value, as it travels and is logged
        return str(self.value)

    INVALID = "invalid"  # bad request parameters: the problems travel as data
    REJECTED = "rejected"
    STOPPED = "stopped"
    GENERATION = "generation"
    DEADLINE = "deadline"
    OWN_DEADLINE = "own_deadline"  # the client's own timeout_s passed (408), not the server's deadline
    DRAIN_TIMEOUT = "drain_timeout"
    BUSY = "busy"
    CANCELLED = "cancelled"  # its client went away: not an error of the replica
    REPLICA_FAILED = "replica_failed"  # not an error a client caused: a bug, logged on the replica


# most specific class first: the first one an exception is an instance of gives its kind
FAILURES: tuple[tuple[FailureKind, type[EngineError]], ...] = (
    (FailureKind.OWN_DEADLINE, OwnDeadlineExceeded),
    (FailureKind.DEADLINE, DeadlineExceeded),
    (FailureKind.GENERATION, GenerationError),
    (FailureKind.INVALID, InvalidRequest),
    (FailureKind.REJECTED, RequestRejected),
    (FailureKind.STOPPED, EngineStopped),
    (FailureKind.DRAIN_TIMEOUT, DrainTimeout),
    (FailureKind.BUSY, EngineBusy),
    (FailureKind.CANCELLED, RequestCancelled),
    (FailureKind.REPLICA_FAILED, ReplicaFailed),
)


@attrs.frozen(slots=True)
class Failed:
    """A request that failed: the kind of failure and what the exception carried, so the controller raises its twin.

    `detail` is the exception's text (a config error's header); `problems` a config
    error's problems, as data (path, message, source), and `omitted` how many more a
    bad request had (`InvalidRequest.omitted`); `queued`, `running` and
    `retry_after_s` what a busy engine said.
    """

    rid: int
    kind: FailureKind
    detail: str
    problems: tuple[Problem, ...] = ()
    queued: int = 0
    running: int = 0
    retry_after_s: float | None = None
    omitted: int = 0

    @classmethod
    def of(cls, rid: int, exc: BaseException) -> Failed | None:
        """The message for an engine error; None for an exception that is not one (a bug)."""
        kind = next((kind for kind, error in FAILURES if isinstance(exc, error)), None)
        if kind is None:
            return None
        if isinstance(exc, ConfigError):
            return cls(rid, kind, exc.header, exc.problems, omitted=getattr(exc, "omitted", 0))
        if isinstance(exc, EngineBusy):
            return cls(rid, kind, str(exc), (), exc.queued, exc.running, exc.retry_after_s)
        return cls(rid, kind, str(exc))

    def error(self) -> EngineError:
        """The exception the controller raises for this failure: the class, text and data the replica's had."""
        error = dict(FAILURES)[self.kind]
        if issubclass(error, EngineBusy):
            return error(self.detail, queued=self.queued, running=self.running, retry_after_s=self.retry_after_s)
        if issubclass(error, InvalidRequest):
            return error(self.problems, header=self.detail, omitted=self.omitted)
        if issubclass(error, ConfigError):
            return error(self.problems, header=self.detail)  # type: ignore[call-arg]
        return error(self.detail)


ToReplica = Generate | GenerateUnit | FlushCache | Cancel | Stop | Welcome | Refused
FromReplica = Join | Ready | Heartbeat | Chunk | Result | Failed

__all__ = [
    "Ask",
    "Cancel",
    "JoinRefusal",
    "asks",
    "FAILURES",
    "Chunk",
    "Failed",
    "FailureKind",
    "FlushCache",
    "FromReplica",
    "Generate",
    "GenerateUnit",
    "Heartbeat",
    "Join",
    "Ready",
    "Refused",
    "Result",
    "Stop",
    "ToReplica",
    "Welcome",
]
