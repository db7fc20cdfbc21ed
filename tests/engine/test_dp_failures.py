"""A request failing on a replica gets the answer one engine gives: same status, body and headers.

Each engine error goes the way it goes in a group: `Failed.of` on the replica, pickled
over the pipe, `Failed.error()` on the controller; the HTTP problem of what comes out
must equal the HTTP problem of the original, which is what one engine answers.
"""

from __future__ import annotations

import pickle

import pytest

from engine.dp.messages import Failed, FailureKind
from engine.errors import (
    MAX_PROBLEMS_SHOWN,
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
from engine.http.problems import problem_of
from engine.request_params import structure_params
from sgconf.errors import Problem


def _invalid() -> InvalidRequest:
    try:
        structure_params([("$.temperature", "temperature", -1.0), ("$.sampling_params.top_k", "top_k", "many")])
    except InvalidRequest as exc:
        return exc
    raise AssertionError("the request model accepted a negative temperature")


def _many_unknown() -> InvalidRequest:
    """More unknown parameters than are listed: the rest only counted (`omitted`), one line says how many."""
    try:
        structure_params([(f"$.bogus{i}", f"bogus{i}", 1) for i in range(MAX_PROBLEMS_SHOWN + 3)])
    except InvalidRequest as exc:
        assert exc.omitted == 3
        return exc
    raise AssertionError("the request model accepted unknown parameters")


ERRORS: list[EngineError] = [
    _invalid(),
    _many_unknown(),
    InvalidRequest([Problem("$.timeout_s", "must be at most 'request_timeout_s' (30)", "http")], header="bad"),
    RequestRejected("token id 99999 is outside the vocabulary 0..999"),
    EngineStopped("the engine is shut down -- start a new one"),
    GenerationError("the request does not fit the KV pool"),
    DeadlineExceeded("the request did not finish within 2s"),
    OwnDeadlineExceeded("request 5 passed its deadline of 0.1 s before it finished (8 of 16 tokens)"),
    EngineBusy("cannot flush the cache while requests run", queued=2, running=3),
    EngineBusy("busy", queued=0, running=1, retry_after_s=2.2),
    DrainTimeout("running requests did not finish within 5s", queued=1, running=4, retry_after_s=5.0),
    ReplicaFailed("replica 1 failed the request -- see its log"),
]


def _across(exc: BaseException) -> EngineError:
    """What the controller raises for `exc` raised on a replica."""
    failed = Failed.of(7, exc)
    assert failed is not None
    return pickle.loads(pickle.dumps(failed)).error()


@pytest.mark.parametrize("exc", ERRORS, ids=lambda e: f"{type(e).__name__}-{str(e)[:12]}")
def test_the_group_answers_what_one_engine_answers(exc: EngineError) -> None:
    twin = _across(exc)
    assert type(twin) is type(exc)
    one, group = problem_of(exc), problem_of(twin)
    assert (group.status, group.body(), group.headers) == (one.status, one.body(), one.headers)


def test_a_bad_request_is_422_with_its_problems_as_data() -> None:
    twin = _across(_invalid())
    assert problem_of(twin).status == 422
    assert isinstance(twin, InvalidRequest)
    assert [p.path for p in twin.problems] == ["$.temperature", "$.sampling_params.top_k"]


def test_the_engines_refusal_at_a_parameter_crosses_with_its_path() -> None:
    """Too long for the context (only a replica's engine can tell) stays at `$.max_new_tokens` over the pipe, so
    the edge answers it at the client's spelling as it does for one engine."""
    from engine.http.bodies import refused_as_sent, sent_paths
    from engine.request_params import OPENAI_NAMES, beyond_context

    refusal = beyond_context(2040, 16, 2048)
    twin = _across(refusal)
    assert isinstance(twin, InvalidRequest) and twin.lines() == refusal.lines()
    assert [p.path for p in twin.problems] == ["$.max_new_tokens"]
    with pytest.raises(InvalidRequest) as info, refused_as_sent(sent_paths([], OPENAI_NAMES)):
        raise twin
    assert [p.path for p in info.value.problems] == ["$.max_tokens"]
    assert problem_of(info.value).status == 422


def test_a_drain_timeout_keeps_its_retry_after() -> None:
    twin = _across(DrainTimeout("slow", queued=0, running=1, retry_after_s=2.5))
    assert isinstance(twin, DrainTimeout) and twin.retry_after_s == 2.5
    assert problem_of(twin).headers == {"Retry-After": "3"}


def test_a_cancellation_travels_as_a_cancellation_not_a_replica_bug() -> None:
    failed = Failed.of(3, RequestCancelled("the client went away"))
    assert failed is not None and failed.kind is FailureKind.CANCELLED
    assert type(failed.error()) is RequestCancelled


def test_every_failure_kind_names_an_exception() -> None:
    from engine.dp.messages import FAILURES

    assert {kind for kind, _ in FAILURES} == set(FailureKind)


def test_an_exception_that_is_no_engine_error_has_no_kind() -> None:
    assert Failed.of(1, KeyError("bug")) is None


def test_a_request_crosses_to_a_replica_as_the_request_models_typed_objects() -> None:
    """`Generate` carries the checked `SamplingParams`, not a dict of names; it pickles as itself."""
    from engine.dp.messages import Ask, Generate, GenerateUnit, asks
    from engine.request_params import SamplingParams

    argss = [
        {"prompt_or_ids": "hi", "max_new_tokens": 3, "stop": ["\n"], "seed": None, "timeout_s": 2.0},
        {"prompt_or_ids": [1, 2], "max_new_tokens": 3, "stop": ["\n"], "seed": None, "timeout_s": 2.0},
    ]
    items = asks(argss)
    assert items[0] == Ask("hi", SamplingParams(max_new_tokens=3, stop=("\n",)), 2.0)
    assert items[1].prompt == (1, 2) and items[1].sampling is items[0].sampling  # equal asks are checked once
    for message in (Generate(1, items[0], stream=True), GenerateUnit(2, items)):
        assert pickle.loads(pickle.dumps(message)) == message


def test_a_bad_parameter_is_refused_on_the_controller_as_one_engine_refuses_it() -> None:
    from engine.dp.messages import asks
    from engine.request_params import sampling_of

    with pytest.raises(InvalidRequest) as group:
        asks([{"prompt_or_ids": "x", "temperature": -1.0}])
    with pytest.raises(InvalidRequest) as one:
        sampling_of({"temperature": -1.0})
    assert problem_of(group.value).body() == problem_of(one.value).body()


def test_a_refused_join_carries_a_typed_reason() -> None:
    from engine.dp.messages import JoinRefusal, Refused

    refused = pickle.loads(pickle.dumps(Refused(JoinRefusal.DUPLICATE, "replica 2 joined already")))
    assert refused.reason is JoinRefusal.DUPLICATE and refused.message == "replica 2 joined already"
