"""What a config group's round produces and consumes: its errors, rank reports, receipts and side-effect protocol.

Kept apart from `runtime.distributed` so that code reporting on a group (the HTTP layer,
a replica controller) can name these without loading the board machinery or torch.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs
import structlog

from runtime.errors import Refusal
from sgconf.errors import ConfigError, OverrideRefused

log = structlog.get_logger("runtime.distributed")

# the board's key prefix, and the two values a round's decision key may take
PREFIX = "sgconf/config_group/"
COMMIT = "commit"
ABORT = "abort"


class PreparedEffect(Protocol):
    """A side effect that is ready to go: `commit()` makes it live, `abort()` releases it."""

    def commit(self) -> None: ...

    def abort(self) -> None: ...


# A side effect is a callable taking the source and the proposed values; it prepares
# what it needs (opens a storage directory) and returns the prepared effect, or None
# when the override does not concern it. Raising refuses the override on this rank.
SideEffect = Callable[[str, Mapping[str, Any]], "PreparedEffect | None"]


@attrs.frozen(slots=True)
class RankState:
    """What one rank reported: its generation and fingerprint, or that it did not answer."""

    rank: int
    alive: bool
    generation: int | None = None
    fingerprint: str | None = None
    values: Mapping[str, Any] = attrs.field(factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "alive": self.alive,
            "generation": self.generation,
            "fingerprint": self.fingerprint,
            **({"values": dict(self.values)} if self.values else {}),
        }


@attrs.frozen(slots=True)
class Mismatch:
    """Ranks whose fingerprint differed from the coordinator's after a commit, and the fields that differ."""

    round: int
    source: str
    ranks: tuple[int, ...]
    fields: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"round": self.round, "source": self.source, "ranks": list(self.ranks), "fields": list(self.fields)}


@attrs.frozen(slots=True)
class Propagated:
    """The receipt of a committed round: the shared generation and what every rank reported after it."""

    round: int
    source: str
    fields: tuple[str, ...]
    generation: int
    ranks: tuple[RankState, ...]
    mismatch: Mismatch | None

    @property
    def consistent(self) -> bool:
        """True when every rank answered with the coordinator's generation and fingerprint."""
        return self.mismatch is None and all(r.alive for r in self.ranks)


@attrs.define(slots=True)
class Prepared:
    proposal: Any
    effects: list[PreparedEffect]


def default_host() -> str:
    return os.environ.get("MASTER_ADDR", "127.0.0.1")


def reasons_of(exc: BaseException) -> list[str]:
    if isinstance(exc, ConfigError):
        return exc.lines()
    return [str(exc) or type(exc).__name__]


def refusal_reason(exc: BaseException) -> Refusal:
    """The typed reason a refusal travels with: the exception's own `refusal_reason`, else the group's.

    The group's reasons: `not_hot` (a field that may not change after publish), `invalid`
    (any other config problem), `failed` (anything else). An exception declaring a
    reason `Refusal` does not list is a bug of its class: it travels as `failed`, logged.
    """
    own = getattr(exc, "refusal_reason", None)
    if own is not None:
        try:
            return Refusal(own)
        except ValueError:
            log.error("config_group.unknown_refusal_reason", error=type(exc).__name__, reason=repr(own))
            return Refusal.FAILED
    if isinstance(exc, OverrideRefused):
        return Refusal.NOT_HOT
    return Refusal.INVALID if isinstance(exc, ConfigError) else Refusal.FAILED


def digest(value: Any) -> str:
    return hashlib.sha256(repr(value).encode()).hexdigest()[:16]


def quietly(step: Callable[[], object], what: str) -> bool:
    try:
        step()
    except Exception as exc:  # one effect failing must not stop the others from being released
        log.error("config_group.effect_failed", step=what, error=str(exc))
        return False
    return True


def digests(ctx: Any) -> dict[str, str]:
    """Per-field digests of a rank's values, for telling which fields differ between ranks.

    Each hashes the real value, never its redacted form, so two ranks holding different
    secrets are reported as different (the report itself shows only field names).
    """
    schema = ctx.schema
    return {name: digest(value) for name, value in ctx.group_values(schema.field_names()).items()}


__all__ = [
    "ABORT",
    "COMMIT",
    "PREFIX",
    "Mismatch",
    "Prepared",
    "PreparedEffect",
    "Propagated",
    "RankState",
    "SideEffect",
    "default_host",
    "digest",
    "digests",
    "quietly",
    "reasons_of",
    "refusal_reason",
]
