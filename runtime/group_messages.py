"""Every message of a config group's rounds, between the coordinator and its followers, and the refusal reasons.

The coordinator posts a round to each follower's inbox (`StatusAsk`, `Override`,
`CatchUp`, `StopListening`); a follower answers under the round's key with a
`RankReport`, a `Vote`, an `Ack` (or `Aborted`). They travel as JSON through the
board (a `TCPStore`, between processes and nodes), so each is a frozen attrs class
with `to_wire` and `from_wire`: the body is the class unstructured by the project's
cattrs converter (`sgconf.convert`) under a `kind` tag, and reading it back goes
through the same converter, strictly. An unknown kind, a missing or extra key, or a
value of the wrong type is a `GroupMessageError` naming it, never a `KeyError` deep in
a round; a rank running other code than the coordinator is told so.

A refusal carries one `Refusal` reason (`runtime.errors`, the one enum of them), so
callers decide from it, never from the text of the refusal.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

import attrs
import cattrs

from runtime.errors import GroupMessageError, Refusal
from sgconf.convert import converter
from sgconf.dump import json_type
from sgconf.errors import ConversionError

M = TypeVar("M")
_KINDS: dict[str, type[Any]] = {}


def _to_refusal(value: Any, _: Any) -> Refusal:
    try:
        return Refusal(value)
    except ValueError:
        raise ConversionError(f"expected one of {', '.join(r.value for r in Refusal)}") from None


# the project's converter, with an exact hook for the str-valued enum (its `str` hook would match it first)
_converter = converter.copy()
_converter.register_structure_hook(Refusal, _to_refusal)


def _kind(name: str) -> Any:
    """Register a message class under the `kind` tag it travels with."""

    def register(cls: type[M]) -> type[M]:
        attrs.resolve_types(cls)  # type: ignore[type-var]  # the converter structures by the real types, not their annotations' text
        cls.KIND = name  # type: ignore[attr-defined]
        _KINDS[name] = cls
        return cls

    return register


class _Wire:
    """`to_wire` for every message class (its `KIND` set by `_kind`)."""

    __slots__ = ()
    KIND: ClassVar[str]

    def to_wire(self, *, strict: bool = False) -> str:
        """The JSON text of this message; a value JSON cannot carry is written as its repr (TypeError when `strict`)."""
        body = {"kind": self.KIND, **_converter.unstructure(self)}
        return json.dumps(body) if strict else json.dumps(body, default=repr)


def unsendable(values: Mapping[str, Any]) -> list[str]:
    """The names in `values` whose value JSON cannot carry (what `to_wire(strict=True)` refuses), in order."""
    out = []
    for name, value in values.items():
        try:
            json.dumps(_converter.unstructure(value))
        except (TypeError, ValueError):
            out.append(name)
    return out


# -- coordinator to follower (its inbox) -------------------------------------------------


@_kind("status")
@attrs.frozen(slots=True)
class StatusAsk(_Wire):
    """Report your generation, fingerprint and the named fields' values (`RankReport`)."""

    round: int
    fields: tuple[str, ...] = ()


@_kind("override")
@attrs.frozen(slots=True)
class Override(_Wire):
    """Vote on applying `fields` from `source`, based on `base_generation`; wait `timeout_s` for the decision."""

    round: int
    source: str
    fields: dict[str, Any]
    base_generation: int
    timeout_s: float


@_kind("catch_up")
@attrs.frozen(slots=True)
class CatchUp(_Wire):
    """Reach the coordinator's `generation` with these values, each checked against the source that `set_by` names."""

    round: int
    generation: int
    values: dict[str, Any]
    set_by: dict[str, str]
    sources: tuple[str, ...]


@_kind("stop")
@attrs.frozen(slots=True)
class StopListening(_Wire):
    """Leave the group: the coordinator closed it (or the follower closes itself)."""


# -- follower to coordinator (under the round's keys) ------------------------------------


@_kind("report")
@attrs.frozen(slots=True)
class RankReport(_Wire):
    """A rank's state: its generation, fingerprint and the values asked for (shown redacted)."""

    generation: int
    fingerprint: str
    values: dict[str, Any] = attrs.field(factory=dict)


@_kind("vote")
@attrs.frozen(slots=True)
class Vote(_Wire):
    """Yes, or no with the reason and its lines (`$.path: message`)."""

    ok: bool
    generation: int
    reasons: tuple[str, ...] = ()
    reason: Refusal | None = None

    @classmethod
    def unreadable(cls, error: str) -> Vote:
        """The no vote standing for a rank whose vote could not be read: the round aborts, naming it."""
        return cls(False, -1, (error,), Refusal.FAILED)


@_kind("ack")
@attrs.frozen(slots=True)
class Ack(_Wire):
    """A rank's state after a commit (or a catch-up): with its per-field digests, and why it failed if it did.

    `refusal` is None when the rank got where it was asked to; else its typed reason,
    with `errors` the lines that say what happened.
    """

    generation: int
    fingerprint: str
    values: dict[str, Any] = attrs.field(factory=dict)
    digests: dict[str, str] = attrs.field(factory=dict)
    changed: int = 0  # for a catch-up: how many fields the side effects saw
    refusal: Refusal | None = None
    errors: tuple[str, ...] = ()

    @classmethod
    def unreadable(cls, error: str) -> Ack:
        """The failed ack standing for a rank whose ack could not be read: its state unknown (no fingerprint)."""
        return cls(-1, "", refusal=Refusal.FAILED, errors=(error,))


@_kind("aborted")
@attrs.frozen(slots=True)
class Aborted(_Wire):
    """The rank released what it prepared: the round was aborted."""


ToFollower = StatusAsk | Override | CatchUp | StopListening
FromFollower = RankReport | Vote | Ack | Aborted


def from_wire(text: str | bytes, *expected: type[M]) -> M:
    """The message in `text`, one of the `expected` classes; raises GroupMessageError naming what is wrong."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise GroupMessageError(f"a config-group message is not JSON ({exc}) -- the board holds foreign data") from None
    if not isinstance(data, Mapping):
        article = "an" if json_type(data)[0] in "aeiou" else "a"
        raise GroupMessageError(
            f"a config-group message is {article} {json_type(data)}, not an object -- the board holds foreign data"
        )
    body = dict(data)
    kind = body.pop("kind", None)
    cls = _KINDS.get(kind) if isinstance(kind, str) else None
    wanted = ", ".join(c.KIND for c in expected)  # type: ignore[attr-defined]
    if cls is None:
        msg = (
            f"unknown config-group message kind {kind!r} (this rank reads {', '.join(_KINDS)})"
            " -- run the same version of the code on every rank of the group"
        )
        raise GroupMessageError(msg)
    if expected and cls not in expected:
        msg = f"expected a config-group {wanted} message here, got {kind!r} -- run the same version of the code on every rank"
        raise GroupMessageError(msg)
    try:
        return _converter.structure(body, cls)  # type: ignore[no-any-return]
    except (ConversionError, cattrs.BaseValidationError, ValueError, TypeError) as exc:
        msg = f"a config-group {kind!r} message is malformed: {exc} -- run the same version of the code on every rank"
        raise GroupMessageError(msg) from None


__all__ = [
    "Aborted",
    "Ack",
    "CatchUp",
    "FromFollower",
    "Override",
    "RankReport",
    "Refusal",
    "StatusAsk",
    "StopListening",
    "ToFollower",
    "Vote",
    "from_wire",
    "unsendable",
]
