"""Exceptions raised by the runtime context; each also subclasses a builtin so callers may catch either."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence

from sgconf.errors import ConfigError, OverrideRefused, Problem, SgconfError


class Refusal(str, enum.Enum):
    """Why a rank refused a config change: the one enum of them, which travels with the refusal.

    `invalid`, `not_hot`, `diverged` and `failed` are the config group's own reasons
    (`runtime.group_results.refusal_reason`); the others are declared by the runtimes
    built on it, on their exceptions, as `refusal_reason`. Callers (an HTTP layer
    choosing a status) decide from it, never from the text of the refusal.
    """

    def __str__(self) -> str:  # the value, as it travels and is logged
        return str(self.value)

    INVALID = "invalid"  # a bad name, type, choice or cross-field rule
    NOT_HOT = "not_hot"  # the field may not change after publish
    CAPACITY = "capacity"  # above the capacity planned at start-up
    STORAGE = "storage"  # the storage backend cannot open here
    DRAIN_TIMEOUT = "drain_timeout"  # running requests did not finish in time
    DIVERGED = "diverged"  # the rank is at another generation than the coordinator
    FAILED = "failed"  # anything else (a rank that stopped, a commit that failed, a bug)


class NotPublishedError(SgconfError, RuntimeError):
    """Raised when config is read (or overridden) before any `publish()`."""


class ContextReplacedError(SgconfError, RuntimeError):
    """Raised when a write goes to a context that a later `publish()` replaced."""


class StaleProposalError(ConfigError, RuntimeError):
    """Raised when a validated override is committed after the config it was checked against changed."""


class RevertConflict(OverrideRefused):
    """Raised when `receipt.revert()` would undo a field that a later override changed again."""


class RoleViolation(SgconfError, PermissionError):
    """Raised in `enforce` mode when a role reads a namespace outside its declared set."""


class ForeignNamespaceError(SgconfError, TypeError):
    """Raised by a typed `accessor(SomeConfig)` when the schema in use holds another schema's class at that path."""


class MissingNamespaceError(SgconfError, AttributeError):
    """Raised when code reads a namespace the published schema does not declare."""


class PropagationFailed(ConfigError):
    """Raised when a propagated override was applied on no rank; lists each refusing or silent rank."""

    def __init__(
        self,
        source: str,
        refusals: Mapping[int, Sequence[str]],
        silent: Sequence[int] = (),
        *,
        timeout_s: float,
        late: bool = False,
        reasons: Mapping[int, Refusal] | None = None,
    ) -> None:
        self.source = source
        self.refusals = {rank: tuple(lines) for rank, lines in sorted(refusals.items())}
        # each refusing rank's typed reason (`refusal_reason`), so callers never read the text
        self.reasons: dict[int, Refusal] = {
            rank: Refusal((reasons or {}).get(rank, Refusal.FAILED)) for rank in self.refusals
        }
        self.silent = tuple(sorted(silent))
        problems = [Problem(f"rank {rank}", reason) for rank, reasons in self.refusals.items() for reason in reasons]
        problems += [Problem(f"rank {rank}", f"did not answer within {timeout_s:g}s") for rank in self.silent]
        if late:
            msg = f"a rank's deadline ({timeout_s:g}s) passed before the decision reached it -- raise the group's sync timeout"
            problems.append(Problem("$round", msg))
        ranks = sorted({*self.refusals, *self.silent})
        who = ", ".join(f"rank {r}" for r in ranks) or "a rank"
        header = f"override from {source!r} applied on no rank: {who} did not accept it -- nothing changed on any rank"
        super().__init__(problems, header=header)


class RankDiverged(ConfigError):
    """Raised on a rank asked to vote on a round based on another generation than its own."""

    refusal_reason = Refusal.DIVERGED


class CommitFailed(SgconfError, RuntimeError):
    """Raised on a rank whose commit of a validated change failed (a side effect, the swap): it stayed where it was."""

    refusal_reason = Refusal.FAILED


class GroupMessageError(SgconfError, ValueError):
    """Raised when a config-group message cannot be read: an unknown kind, a missing key, a wrong type."""


class RanksSilent(PropagationFailed, TimeoutError):
    """Raised when a propagated override was applied on no rank because some rank did not answer in time."""


class ResyncFailed(ConfigError, RuntimeError):
    """Raised when a rank that joined late could not be brought to the coordinator's generation."""

    def __init__(self, rank: int, generation: int, reasons: Sequence[str], *, reason: Refusal = Refusal.FAILED) -> None:
        self.rank = rank
        self.reasons = tuple(reasons)
        self.reason = reason  # typed: why the rank could not get there (`failed` for silence)
        header = (
            f"rank {rank} could not catch up to generation {generation} -- "
            "fix the reason below and resync or restart that rank again, or restart the whole group"
        )
        super().__init__([Problem(f"rank {rank}", reason) for reason in self.reasons], header=header)


class LifecycleError(SgconfError, RuntimeError):
    """Raised when a call comes at the wrong point of an object's life.

    A scope entered twice, an install made twice or restored before it was made.
    """


class GroupSetupError(SgconfError, ValueError):
    """Raised when a config group is built or addressed with a rank, address or host it cannot use."""


class CoordinatorOnly(SgconfError, RuntimeError):
    """Raised when a follower rank calls what only a config group's coordinator can do."""


__all__ = [
    "CommitFailed",
    "GroupMessageError",
    "Refusal",
    "LifecycleError",
    "GroupSetupError",
    "CoordinatorOnly",
    "ForeignNamespaceError",
    "MissingNamespaceError",
    "PropagationFailed",
    "RankDiverged",
    "RanksSilent",
    "ResyncFailed",
    "ContextReplacedError",
    "NotPublishedError",
    "RevertConflict",
    "RoleViolation",
    "StaleProposalError",
]
