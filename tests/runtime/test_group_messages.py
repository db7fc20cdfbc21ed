"""The config group's messages: typed on both sides of the board, read back strictly, refusals with a typed reason."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from runtime.errors import CommitFailed, GroupMessageError, RankDiverged, Refusal
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
)
from runtime.group_results import refusal_reason

MESSAGES = [
    StatusAsk(3, ("schedule_policy",)),
    Override(4, "http", {"schedule_policy": "lpm", "extra": {"dir": "kv", "n": (1, 2)}}, 7, 2.5),
    CatchUp(5, 9, {"schedule_conservativeness": 0.25}, {"schedule_conservativeness": "http"}, ("http",)),
    StopListening(),
    RankReport(9, "abc", {"hicache_storage_backend": None}),
    Vote(True, 9),
    Vote(False, 9, ("$.schedule_policy: not hot",), Refusal.NOT_HOT),
    Ack(9, "abc", digests={"schedule_policy": "ff"}, changed=2),
    Ack(8, "abd", refusal=Refusal.DIVERGED, errors=("$generation: ahead",)),
    Aborted(),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_reads_back_as_itself(message: Any) -> None:
    """Lists arrive as tuples and objects as read-only dicts (frozen, like every config value); equal otherwise."""
    back = from_wire(message.to_wire())
    assert back == message
    assert type(back) is type(message)


def test_a_refusal_reason_reads_back_as_the_enum_not_text() -> None:
    vote = from_wire(Vote(False, 1, ("x",), Refusal.DRAIN_TIMEOUT).to_wire(), Vote)
    assert vote.reason is Refusal.DRAIN_TIMEOUT


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"kind": "promote", "round": 1}', "unknown config-group message kind 'promote'"),
        ('{"round": 1}', "unknown config-group message kind None"),
        ('{"kind": "vote", "ok": true}', "missing key 'generation'"),
        ('{"kind": "vote", "ok": true, "generation": 1, "why": 2}', "unknown key 'why'"),
        ('{"kind": "vote", "ok": false, "generation": 1, "reason": "tired"}', "expected one of invalid, not_hot"),
        ('{"kind": "vote", "ok": "perhaps", "generation": 1}', "item 'ok'"),
        ("[1, 2]", "is an array, not an object -- the board holds foreign data"),
        ('"text"', "is a string, not an object -- the board holds foreign data"),
        ("not json", "is not JSON"),
    ],
)
def test_an_unreadable_message_is_refused_by_name(text: str, says: str) -> None:
    with pytest.raises(GroupMessageError, match="config-group") as info:
        from_wire(text)
    assert says in str(info.value)


def test_a_reply_of_another_kind_than_the_key_holds_is_refused() -> None:
    with pytest.raises(GroupMessageError) as info:
        from_wire(Vote(True, 1).to_wire(), Ack)
    assert str(info.value) == (
        "expected a config-group ack message here, got 'vote' -- run the same version of the code on every rank"
    )


def test_a_strict_message_refuses_a_value_json_cannot_carry() -> None:
    message = Override(1, "http", {"when": object()}, 0, 1.0)
    assert '"when": "<object object' in message.to_wire()  # a report may show it as its repr
    with pytest.raises(TypeError):
        message.to_wire(strict=True)  # a proposal must not


def test_one_enum_of_refusal_reasons_for_the_group_and_the_engine() -> None:
    from engine.errors import CapacityExceeded, DrainTimeout, StorageRefused
    from engine.errors import Refusal as EngineRefusal

    assert EngineRefusal is Refusal
    assert refusal_reason(DrainTimeout("slow", queued=0, running=1)) is Refusal.DRAIN_TIMEOUT
    assert refusal_reason(CapacityExceeded("$.x: too big")) is Refusal.CAPACITY
    assert refusal_reason(StorageRefused("$.x: no dir")) is Refusal.STORAGE
    assert refusal_reason(CommitFailed("swap failed")) is Refusal.FAILED


def test_an_undeclared_reason_travels_as_failed() -> None:
    class Odd(Exception):
        refusal_reason = "moody"

    assert refusal_reason(Odd()) is Refusal.FAILED


class _Schema:
    def field_names(self) -> list[str]:
        return ["schedule_policy"]


class _Context:
    schema = _Schema()

    def __init__(self, generation: int) -> None:
        self.generation = generation

    def fingerprint(self) -> str:
        return f"fp{self.generation}"

    def group_values(self, names: Sequence[str]) -> dict[str, Any]:
        return {name: "fcfs" for name in names}


def _follower(generation: int) -> Any:
    from runtime.group_follower import Following

    follower = Following()
    follower.rank, follower.coordinator, follower._effects = 1, 0, []
    ctx = _Context(generation)
    follower._context = lambda: ctx
    return follower


def test_a_rank_ahead_of_the_coordinator_answers_a_catch_up_with_a_typed_refusal() -> None:
    ack = _follower(5)._catch_up(CatchUp(1, 3, {}, {}, ()))
    assert ack.refusal is Refusal.DIVERGED
    assert ack.errors and "ahead of the coordinator at 3" in ack.errors[0]
    assert from_wire(ack.to_wire(), Ack) == ack


def test_a_rank_at_the_coordinators_generation_answers_without_refusal() -> None:
    ack = _follower(3)._catch_up(CatchUp(1, 3, {}, {}, ()))
    assert (ack.generation, ack.fingerprint, ack.refusal, ack.errors) == (3, "fp3", None, ())


def test_resync_failed_keeps_the_ranks_typed_reason() -> None:
    from runtime.errors import ResyncFailed

    exc = ResyncFailed(2, 7, ["$generation: ahead"], reason=Refusal.DIVERGED)
    assert exc.reason is Refusal.DIVERGED
    assert ResyncFailed(2, 7, ["did not answer within 1s"]).reason is Refusal.FAILED
    assert refusal_reason(RankDiverged("$generation: behind")) is Refusal.DIVERGED
