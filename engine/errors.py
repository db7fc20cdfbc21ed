"""The serving runtime's exceptions.

The HTTP app chooses a status code from the exception's type alone (`engine.http.problems`),
never from its message, so each failure a client can see has a class of its own. A
replica sends a failed request's kind over its pipe (`engine.dp.messages`) and the
controller raises the same class; a refused config change carries its `Refusal` reason
across the config group. So a replica group answers exactly as one engine does.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from runtime.errors import Refusal  # the one enum of refusal reasons; declared by the config group's runtime
from sgconf.errors import ConfigError, Problem, SgconfError


class EngineError(SgconfError):
    """Base of the errors the engine reports to its callers (never a bug of ours)."""


class RequestRejected(EngineError, ValueError):
    """Raised when a request can never run here (too long for the context or the KV pool, bad token ids)."""


# the most problems one refusal lists: a body of 150,000 unknown keys is answered with these
# and a count of the rest, not a 10 MB list built while every other client waits
MAX_PROBLEMS_SHOWN = 20


def more_problems(count: int) -> str:
    """The line that stands for `count` problems a refusal does not list."""
    return f"... and {count} more problem{'s' if count != 1 else ''}"


class InvalidRequest(ConfigError, RequestRejected):
    """Raised when request parameters have the wrong type or are out of their bounds; one `$.name` problem each.

    `omitted` counts the problems found past `MAX_PROBLEMS_SHOWN` and not collected (an
    unknown key is only counted then, with no suggestion worked out for it).
    """

    def __init__(self, problems: Iterable[Problem] | str, *, header: str | None = None, omitted: int = 0) -> None:
        self.omitted = omitted  # before the base class renders the message
        super().__init__(problems, header=header)

    def render(self) -> str:
        text = super().render()
        return f"{text}\n  {more_problems(self.omitted)}" if self.omitted else text


class RequestCancelled(EngineError):
    """Raised for a request its client gave up on (the connection closed): it left the scheduler, its KV freed."""


class EngineBusy(EngineError):
    """Raised when an operation that needs an idle engine could not get one; `retry_after_s` suggests when to retry."""

    def __init__(self, message: str, *, queued: int, running: int, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.queued = queued
        self.running = running
        self.retry_after_s = retry_after_s


class DrainTimeout(EngineBusy):
    """Raised when running requests did not finish within `drain_timeout_s` for a change that needs an idle engine."""

    refusal_reason: ClassVar[Refusal] = Refusal.DRAIN_TIMEOUT


class CapacityExceeded(ConfigError):
    """Raised when a hot override asks for more than the capacity planned at start-up; nothing changed."""

    refusal_reason: ClassVar[Refusal] = Refusal.CAPACITY


class EngineStopped(EngineError):
    """Raised when a request reaches an engine that was shut down (or is shutting down)."""


class GenerationError(EngineError):
    """Raised when a request failed inside the engine (it did not fit the KV pool)."""


class DeadlineExceeded(GenerationError, TimeoutError):
    """Raised when a request did not finish within its deadline ('request_timeout_s' or its timeout_s)."""


class OwnDeadlineExceeded(DeadlineExceeded):
    """Raised when a request did not finish within the `timeout_s` its client chose.

    The budget was the client's own, so the answer is a 408 naming it, not a server
    error; a request that runs past the server's 'request_timeout_s' stays a 504.
    """


class StorageRefused(ConfigError):
    """Raised when a HiCache storage backend cannot be opened with the given settings (bad directory, cache off)."""

    refusal_reason: ClassVar[Refusal] = Refusal.STORAGE


class InvalidAttach(ConfigError, TypeError):
    """Raised when a storage attach's own values are malformed (no backend named, options that are not a JSON object).

    A TypeError too: a malformed value used to surface as one from deep inside the attach.
    """


class NoSuchReplica(EngineError, LookupError):
    """Raised when a replica index is out of range, or the server runs a single engine."""


class ReplicaFailed(EngineError):
    """Raised when a request cannot be served because its replica exited or none is alive."""


class ReplicaUnresponsive(ReplicaFailed):
    """Raised for a request whose replica stopped reporting progress (stopped, hung) and no other replica could take it."""


class ReplicaLost(ReplicaFailed):
    """Raised for a request whose replica exited before answering and no other replica could take it."""


class JoinRefused(ReplicaFailed):
    """Raised on a replica of another node that the controller did not take; `reason` is its typed reason.

    `reason` is the controller's `JoinRefusal` (`engine.dp.messages`), None when it gave
    none (it never answered), so the replica words its exit from it, never from the text.
    """

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason


class ReplicaRunning(EngineError):
    """Raised when asked to restart a replica whose process is still running."""


class ReplicaElsewhere(EngineError):
    """Raised when asked to restart a replica that another node runs (that node restarts its own)."""


class ReplicaExited(EngineError):
    """Raised when asked to resync a replica whose process has exited."""


class PortUnavailable(EngineError, OSError):
    """Raised at start-up when a listener's address cannot be bound (in use, not local, no permission)."""


class TemplateError(SgconfError, ValueError):
    """A template that failed while rendering (its own `raise_exception`, or a jinja2 error)."""


class MemoryGuardError(ConfigError, MemoryError):
    """The model does not fit: `needed_bytes` against `usable_bytes`."""

    def __init__(self, message: str, *, needed_bytes: int, usable_bytes: int) -> None:
        self.needed_bytes = needed_bytes
        self.usable_bytes = usable_bytes
        super().__init__([Problem("$.model.model_path", message)], header="the model does not fit in memory")


class WeightsError(ConfigError):
    """A checkpoint that cannot be loaded into the model; each problem names the tensor or file."""


class WaitTimedOut(EngineError, TimeoutError):
    """Raised when a wait the caller bounded ran out.

    A request that did not finish, a stream that sent nothing, a port nothing listens on.
    """


class EngineStateError(EngineError, RuntimeError):
    """Raised when an engine call needs a state the engine is not in (`step()` on a running engine)."""


__all__ = [
    "EngineStateError",
    "WaitTimedOut",
    "CapacityExceeded",
    "DeadlineExceeded",
    "OwnDeadlineExceeded",
    "DrainTimeout",
    "EngineBusy",
    "EngineError",
    "EngineStopped",
    "GenerationError",
    "InvalidRequest",
    "MAX_PROBLEMS_SHOWN",
    "MemoryGuardError",
    "NoSuchReplica",
    "PortUnavailable",
    "Refusal",
    "ReplicaElsewhere",
    "ReplicaExited",
    "JoinRefused",
    "ReplicaFailed",
    "ReplicaLost",
    "ReplicaRunning",
    "ReplicaUnresponsive",
    "RequestCancelled",
    "RequestRejected",
    "StorageRefused",
    "more_problems",
    "TemplateError",
    "WeightsError",
]
