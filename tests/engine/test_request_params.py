"""The one request model: every entry (Python, /generate, /v1, building the model) refuses the same bad value in the same words."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from fastapi.testclient import TestClient

from engine.engine import Engine
from engine.errors import InvalidRequest
from engine.http.app import create_app
from engine.http.engine_backend import EngineBackend
from engine.request_params import (
    OPENAI_NAMES,
    OPTION_NAMES,
    RequestOptions,
    SamplingParams,
    json_schema,
    sampling_of,
    structure_params,
)

OURS_TO_OPENAI = {ours: theirs for theirs, ours in reversed(list(OPENAI_NAMES.items()))}

# (field, bad value, the refusal every entry gives)
BAD = [
    ("temperature", math.nan, "expected a finite number (got nan)"),
    ("temperature", math.inf, "expected a finite number (got inf)"),
    ("top_p", -math.inf, "expected a finite number (got -inf)"),
    ("temperature", 1000, "must be in [0, 100] (got 1000)"),
    ("temperature", -0.5, "must be in [0, 100] (got -0.5)"),
    ("top_p", 0, "must be in (0, 1] (got 0)"),
    ("min_p", 1.5, "must be in [0, 1] (got 1.5)"),
    ("top_k", 0, "must be -1 (off) or >= 1 (got 0)"),
    ("frequency_penalty", 3, "must be in [-2, 2] (got 3)"),
    ("repetition_penalty", 0, "must be in (0, 100] (got 0)"),
    ("seed", 2**63, "must be in [0, 9223372036854775807] (got 9223372036854775808)"),
    ("seed", -1, "must be in [0, 9223372036854775807] (got -1)"),
    ("max_new_tokens", 0, "must be in [1, 1048576] (got 0)"),
    ("max_new_tokens", "3", "expected an integer (got '3')"),
    ("max_new_tokens", True, "expected an integer, not a boolean (got True)"),
    ("max_new_tokens", 2.5, "expected an integer (got 2.5)"),
    ("temperature", "hot", "expected a number (got 'hot')"),
    ("ignore_eos", "yes", "expected a boolean (got 'yes')"),
    ("stop", [1], "item 0: expected a string (got 1)"),
    ("stop", [""], "item 0: its length must be in [1, 256] (got '')"),
    ("stop_token_ids", [-3], "item 0: it must be in [0, 2147483647] (got -3)"),
    ("max_new_tokens", math.nan, "expected a finite number (got nan)"),
    ("seed", math.inf, "expected a finite number (got inf)"),
    ("seed", 2**64, "must be in [0, 9223372036854775807] (got 18446744073709551616)"),
    ("top_kk", 1, "unknown parameter 'top_kk' -- did you mean 'top_k'?"),
    # the request options: the same model, the same words
    ("n", 0, "must be in [1, 64] (got 0)"),
    ("n", 65, "must be in [1, 64] (got 65)"),
    ("n", 1.5, "expected an integer (got 1.5)"),
    ("stream", "yes", "expected a boolean (got 'yes')"),
    ("stream", math.nan, "expected a boolean (true/false, 1/0, yes/no, on/off) (got nan)"),
    ("timeout_s", -1, "must be in (0, 86400] (got -1)"),
    ("timeout_s", 0, "must be in (0, 86400] (got 0)"),
    ("timeout_s", math.nan, "expected a finite number (got nan)"),
    ("add_special_tokens", "no", "expected a boolean (got 'no')"),
]
IDS = [f"{f}={v!r}" for f, v, _ in BAD]
# the /v1 routes take no deadline and always tokenize with the special tokens their template chose
V1_BAD = [row for row in BAD if row[0] not in ("timeout_s", "add_special_tokens")]
V1_IDS = [f"{f}={v!r}" for f, v, _ in V1_BAD]
DECLARED_BAD = [row for row in BAD if row[0] != "top_kk"]
DECLARED_IDS = [f"{f}={v!r}" for f, v, _ in DECLARED_BAD]
# a parameter given twice: (route, body, the line naming both places)
TWICE = [
    (
        "/generate",
        {"text": "x", "sampling_params": {"temperature": 0.5}, "temperature": 0.5},
        "$.temperature: 'temperature' is given twice (also as $.sampling_params.temperature) -- keep one",
    ),
    (
        "/generate",
        {"text": "x", "max_tokens": 3, "max_new_tokens": 2},
        "$.max_new_tokens: 'max_new_tokens' is given twice (also as $.max_tokens) -- keep one",
    ),
    (
        "/generate",
        {"text": "x", "sampling_params": {"max_completion_tokens": 3}, "max_tokens": 2},
        "$.max_tokens: 'max_tokens' is given twice (also as $.sampling_params.max_completion_tokens) -- keep one",
    ),
    (
        "/v1/completions",
        {"prompt": "x", "max_tokens": 2, "max_completion_tokens": 5},
        "$.max_completion_tokens: 'max_completion_tokens' is given twice (also as $.max_tokens) -- keep one",
    ),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 5, "max_tokens": 2},
        "$.max_tokens: 'max_tokens' is given twice (also as $.max_completion_tokens) -- keep one",
    ),
    # `prompt` is /generate's other name for `text`
    ("/generate", {"text": "x", "prompt": "y"}, "$.prompt: 'prompt' is given twice (also as $.text) -- keep one"),
]
# a list of prompts holding an item of another kind: (route, body, the line naming that item)
MIXED = [
    ("/v1/completions", {"prompt": ["a", 1]}, "$.prompt[1]: expected a string (got 1)"),
    ("/v1/completions", {"prompt": ["a", "b", ["c"]]}, "$.prompt[2]: expected a string (got ['c'])"),
    ("/v1/completions", {"prompt": [[1], "a"]}, "$.prompt[1]: expected a list of integers (got 'a')"),
    ("/v1/completions", {"prompt": [1, [2]]}, "$.prompt: item 1: expected an integer (got [2])"),
    (
        "/v1/completions",
        {"prompt": {"a": 1}},
        "$.prompt: expected a string, a non-empty list of strings, "
        "a list of integers or a non-empty list of such lists (got {'a': 1})",
    ),
    ("/generate", {"text": ["a", 1]}, "$.text[1]: expected a string (got 1)"),
    ("/generate", {"text": ["a", None]}, "$.text[1]: expected a string (got None)"),
    ("/generate", {"text": [1]}, "$.text[0]: expected a string (got 1)"),
    ("/generate", {"text": []}, "$.text: expected a string or a non-empty list of strings (got [])"),
    ("/generate", {"input_ids": [[1], 2]}, "$.input_ids[1]: expected a list of integers (got 2)"),
    (
        "/generate",
        {"input_ids": "abc"},
        "$.input_ids: expected a list of integers or a non-empty list of such lists (got 'abc')",
    ),
]


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[Engine, TestClient]]:
    engine = Engine.from_args(["--max-total-tokens", "512"])
    try:
        yield engine, TestClient(create_app(EngineBackend(engine)))
    finally:
        engine.shutdown()


def _post(client: TestClient, path: str, body: dict[str, Any]) -> Any:
    # json.dumps writes NaN and Infinity literals, as a careless client would
    return client.post(path, content=json.dumps(body).encode(), headers={"content-type": "application/json"})


@pytest.mark.parametrize(("field", "value", "why"), BAD, ids=IDS)
def test_python_submit_refuses_naming_the_field(served, field: str, value: Any, why: str) -> None:
    """Engine.submit raises InvalidRequest (a ConfigError) with one `$.field` line; nothing is queued."""
    engine, _ = served
    before = engine.busy_counts()
    with pytest.raises(InvalidRequest) as info:
        engine.submit("x", **{field: value})
    assert info.value.lines() == [f"$.{field}: {why}"]
    assert engine.busy_counts() == before


@pytest.mark.parametrize(("field", "value", "why"), BAD, ids=IDS)
@pytest.mark.parametrize("where", ["top", "sampling_params"])
def test_generate_refuses_naming_the_field(served, field: str, value: Any, why: str, where: str) -> None:
    """/generate answers 422 with the same line, at the path the client used."""
    engine, client = served
    finished = engine.scheduler.counters["finished"]
    body = {"text": "x", field: value} if where == "top" else {"text": "x", "sampling_params": {field: value}}
    r = _post(client, "/generate", body)
    path = f"$.{field}" if where == "top" else f"$.sampling_params.{field}"
    assert (r.status_code, r.json()["errors"]) == (422, [f"{path}: {why}"])
    assert engine.scheduler.counters["finished"] == finished


@pytest.mark.parametrize(("field", "value", "why"), V1_BAD, ids=V1_IDS)
@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
def test_openai_routes_refuse_naming_the_parameter(served, field: str, value: Any, why: str, route: str) -> None:
    """/v1 answers 400 in OpenAI's error body, `param` the name the client sent, the same reason."""
    _, client = served
    name = OURS_TO_OPENAI.get(field, field)
    body: dict[str, Any] = (
        {"prompt": "x"} if route == "/v1/completions" else {"messages": [{"role": "user", "content": "x"}]}
    )
    r = _post(client, route, {**body, name: value})
    err = r.json()["error"]
    assert r.status_code == 400, r.text
    assert err["param"] == name
    if field == "top_kk":
        assert err["message"].startswith(f"$.{name}: unknown parameter '{name}' -- did you mean")
    else:
        assert err["message"] == f"$.{name}: {why}"


@pytest.mark.parametrize(("field", "value", "why"), DECLARED_BAD, ids=DECLARED_IDS)
def test_construction_refuses_naming_the_field(field: str, value: Any, why: str) -> None:
    """Building the model directly (or evolving one) checks each bound too, in the same words."""
    cls = RequestOptions if field in OPTION_NAMES else SamplingParams
    with pytest.raises(InvalidRequest) as info:
        cls(**{field: value})
    assert info.value.lines() == [f"$.{field}: {why}"]
    with pytest.raises(InvalidRequest) as evolved:
        attrs.evolve(cls(), **{field: value})
    assert evolved.value.lines() == [f"$.{field}: {why}"]


@pytest.mark.parametrize(("route", "body", "line"), TWICE, ids=[f"{r}:{sorted(b)}" for r, b, _ in TWICE])
def test_a_parameter_given_twice_is_refused_naming_both(served, route: str, body: dict[str, Any], line: str) -> None:
    """Two spellings (or two places) of one parameter: refused naming both, never one silently winning."""
    _, client = served
    r = _post(client, route, body)
    if route == "/generate":
        assert r.status_code == 422, r.text
        assert line in r.json()["errors"]
    else:
        assert r.status_code == 400, r.text
        assert r.json()["error"]["message"] == line


@pytest.mark.parametrize(("route", "body", "line"), MIXED, ids=[f"{r}:{b}" for r, b, _ in MIXED])
def test_a_prompt_list_is_refused_at_its_first_item_of_another_kind(
    served, route: str, body: dict[str, Any], line: str
) -> None:
    """A list's first item gives its kind (texts, id lists, or one prompt of ids); the refusal names the first that differs."""
    _, client = served
    r = _post(client, route, {**body, "max_tokens": 1})
    if route == "/generate":
        assert (r.status_code, r.json()["errors"]) == (422, [line]), r.text
    else:
        assert (r.status_code, r.json()["error"]["message"], r.json()["error"]["param"]) == (400, line, "prompt")


CHAT = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1}
# /v1 parameters the request model does not hold: (route, body, OpenAI's param, message)
V1_OTHER = [
    ("/v1/chat/completions", {**CHAT, "top_logprobs": 0}, "top_logprobs", "'top_logprobs' is not supported"),
    *[
        ("/v1/completions", {"prompt": "x", "user": u}, "user", f"$.user: expected a string (got {u!r})")
        for u in (True, {}, [], 3)
    ],
    ("/v1/chat/completions", {**CHAT, "user": 1.5}, "user", "$.user: expected a string (got 1.5)"),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x", "name": 1}]},
        "messages[0].name",
        "$.messages[0].name: expected a string (got 1)",
    ),
]


@pytest.mark.parametrize(
    ("route", "body", "param", "message"), V1_OTHER, ids=[f"{p}-{i}" for i, (_, _, p, _) in enumerate(V1_OTHER)]
)
def test_v1_refuses_naming_the_parameter_sent(
    served, route: str, body: dict[str, Any], param: str, message: str
) -> None:
    """`param` is the parameter the client sent; `user` and a message's `name` are strings, as OpenAI defines them."""
    _, client = served
    r = _post(client, route, body)
    assert (r.status_code, r.json()["error"]["param"]) == (400, param), r.text
    assert r.json()["error"]["message"].startswith(message)
    assert _post(client, route, {**body, "user": "u1"} if param == "user" else CHAT).status_code == 200


BEYOND = "a prompt of 2040 tokens plus 16 new tokens exceeds the context length 2048 ('context_length')"


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_too_long_for_the_context_is_refused_at_the_parameter_sent(served, stream: bool) -> None:
    """Only the engine knows the token count; its refusal stands at max_new_tokens, under the spelling each client sent."""
    engine, client = served
    ids, why = [1] * 2040, f"{BEYOND} -- ask for at most 8 new tokens, or shorten the prompt"
    with pytest.raises(InvalidRequest) as info:
        engine.submit(ids)
    assert info.value.lines() == [f"$.max_new_tokens: {why}"]
    for body, at in (
        ({}, "$.max_new_tokens"),
        ({"sampling_params": {"max_tokens": 16}}, "$.sampling_params.max_tokens"),
    ):
        r = _post(client, "/generate", {"input_ids": ids, "stream": stream, **body})
        assert (r.status_code, r.json()["errors"]) == (422, [f"{at}: {why}"]), r.text
    for body, param in (({}, "max_tokens"), ({"max_completion_tokens": 16}, "max_completion_tokens")):
        r = _post(client, "/v1/completions", {"prompt": ids, "stream": stream, **body})
        assert (r.status_code, r.json()["error"]) == (
            400,
            {"message": f"$.{param}: {why}", "type": "invalid_request_error", "param": param, "code": None},
        )
    assert engine.busy_counts() == (0, 0)


def test_a_bad_value_beside_a_duplicate_is_reported_too(served) -> None:
    """The issue's case: a bad nested value and its top-level twin; neither is taken, both are named."""
    _, client = served
    r = _post(client, "/generate", {"text": "x", "sampling_params": {"temperature": -1}, "temperature": 0.5})
    assert r.status_code == 422
    assert r.json()["errors"] == [
        "$.sampling_params.temperature: must be in [0, 100] (got -1)",
        "$.temperature: 'temperature' is given twice (also as $.sampling_params.temperature) -- keep one",
    ]


@pytest.mark.parametrize(
    ("ids", "why"),
    [
        ([1, 2.7], "item 1: expected an integer (got 2.7)"),
        ([1, "3"], "item 1: expected an integer (got '3')"),
        ([1, True], "item 1: expected an integer (got True)"),
        ([1, math.nan], "item 1: expected an integer (got nan)"),
        ([1, -2], "item 1: it must be in [0, 2147483647] (got -2)"),
        ([1, 2**31], "item 1: it must be in [0, 2147483647] (got 2147483648)"),
        ([], "0 token ids: the prompt is empty -- send at least 1"),
    ],
)
def test_token_ids_are_checked_strictly_and_alike(served, ids: list[Any], why: str) -> None:
    """A prompt of token ids: the same refusal from Engine.submit, /generate's input_ids and /v1's prompt; nothing queued."""
    engine, client = served
    before = engine.busy_counts()
    with pytest.raises(InvalidRequest) as info:
        engine.submit(ids, max_new_tokens=1)
    assert info.value.lines() == [f"$.prompt_or_ids: {why}"]
    assert engine.busy_counts() == before
    r = _post(client, "/generate", {"input_ids": ids, "max_new_tokens": 1})
    assert (r.status_code, r.json()["errors"]) == (422, [f"$.input_ids: {why}"])
    r = _post(client, "/generate", {"input_ids": [[1], ids], "max_new_tokens": 1})
    assert (r.status_code, r.json()["errors"]) == (422, [f"$.input_ids[1]: {why}"])
    for prompt, at in ((ids, "$.prompt"), ([[1], ids], "$.prompt[1]")):
        r = _post(client, "/v1/completions", {"prompt": prompt, "max_tokens": 1})
        assert (r.status_code, r.json()["error"]["message"], r.json()["error"]["param"]) == (
            400,
            f"{at}: {why}",
            "prompt",
        )


def test_an_empty_text_prompt_is_refused_before_tokenizing_at_every_entry(served, monkeypatch) -> None:
    """`Engine.submit("")` is refused as `/generate` and `/v1` refuse an empty text, the tokenizer never called."""
    engine, client = served
    why = "0 characters: the prompt is empty -- send at least 1"
    monkeypatch.setattr(engine.tokenizer, "encode", lambda *a, **k: pytest.fail("tokenized an empty prompt"))
    with pytest.raises(InvalidRequest) as info:
        engine.submit("", max_new_tokens=1)
    assert info.value.lines() == [f"$.prompt_or_ids: {why}"]
    r = _post(client, "/generate", {"text": "", "max_new_tokens": 1})
    assert (r.status_code, r.json()["errors"]) == (422, [f"$.text: {why}"])
    r = _post(client, "/v1/completions", {"prompt": ["x", ""], "max_tokens": 1})
    assert (r.status_code, r.json()["error"]["message"]) == (400, f"$.prompt[1]: {why}")


def test_submit_batch_and_new_request_check_through_the_model(served) -> None:
    """The lower entries take checked values or refuse: a negative deadline, an evolved bad field."""
    engine, _ = served
    before = engine.busy_counts()
    with pytest.raises(InvalidRequest) as info:
        engine.submit_batch([("x", SamplingParams())], timeout_s=-1)
    assert info.value.lines() == ["$.timeout_s: must be in (0, 86400] (got -1)"]
    with pytest.raises(InvalidRequest) as bad_stream:
        engine.submit_batch([("x", SamplingParams())], stream="yes")  # type: ignore[arg-type]
    assert bad_stream.value.lines() == ["$.stream: expected a boolean (got 'yes')"]
    with pytest.raises(InvalidRequest) as evolved:
        engine.scheduler.new_request([1, 2], max_new_tokens=-5)
    assert evolved.value.lines() == ["$.max_new_tokens: must be in [1, 1048576] (got -5)"]
    assert engine.busy_counts() == before


def test_every_problem_of_a_request_is_listed() -> None:
    """Several bad fields give one error with a line each, in the order given."""
    with pytest.raises(InvalidRequest) as info:
        structure_params([("$.a.temperature", "temperature", -1), ("$.seed", "seed", "x")])
    assert info.value.lines() == [
        "$.a.temperature: must be in [0, 100] (got -1)",
        "$.seed: expected an integer (got 'x')",
    ]
    assert info.value.header == "invalid request parameters: seed, temperature"


def test_good_values_are_structured_by_the_converter() -> None:
    """A stop string becomes a tuple, an integral float an int, a null seed the server's."""
    params = sampling_of({"stop": "\n", "max_new_tokens": 4.0, "seed": None, "temperature": 1})
    assert params == SamplingParams(stop=("\n",), max_new_tokens=4, temperature=1.0)
    assert isinstance(params.max_new_tokens, int) and isinstance(params.temperature, float)


def test_a_tiny_temperature_decodes_greedily(served) -> None:
    """Below the greedy threshold the tokens are the temperature-0 ones, never a sampling failure."""
    engine, client = served
    greedy = engine.generate("tiny t", max_new_tokens=8, ignore_eos=True).token_ids
    assert engine.generate("tiny t", max_new_tokens=8, ignore_eos=True, temperature=1e-300, seed=3).token_ids == greedy
    r = client.post(
        "/v1/completions", json={"prompt": "tiny t", "max_tokens": 8, "temperature": 1e-300, "ignore_eos": True}
    )
    assert r.status_code == 200 and r.json()["choices"][0]["text"] == engine.tokenizer.decode(list(greedy))


def test_the_largest_seed_runs(served) -> None:
    """2**63 - 1 is a valid seed (the generator takes it), from Python and over HTTP."""
    engine, client = served
    assert len(engine.generate("s", max_new_tokens=2, temperature=1.0, seed=2**63 - 1).token_ids) >= 1
    r = client.post("/generate", json={"text": "s", "max_new_tokens": 2, "temperature": 1.0, "seed": 2**63 - 1})
    assert r.status_code == 200, r.text


def test_the_schema_states_the_same_bounds() -> None:
    """The JSON Schema of a parameter carries the bound the checks use, under OpenAI's name on /v1."""
    ours = json_schema()
    assert ours["top_p"]["exclusiveMinimum"] == 0 and ours["top_p"]["maximum"] == 1
    assert ours["seed"]["anyOf"][0]["maximum"] == 2**63 - 1
    openai = json_schema(OPENAI_NAMES)
    assert openai["max_tokens"]["minimum"] == 1 and openai["temperature"]["default"] == 1.0


GROUP_BAD = [
    {"prompt_or_ids": [1, "3"]},
    {"prompt_or_ids": [1, 2.7]},
    {"prompt_or_ids": [1, True]},
    {"prompt_or_ids": ["abc"]},
    {"prompt_or_ids": []},
    {"prompt_or_ids": ""},
    {"prompt_or_ids": "x", "add_special_tokens": "false"},
    {"prompt_or_ids": "x", "timeout_s": -1},
    {"prompt_or_ids": "x", "temperature": -1, "add_special_tokens": 0},
]


@pytest.mark.parametrize("args", GROUP_BAD, ids=[repr(a) for a in GROUP_BAD])
def test_a_replica_group_refuses_a_request_as_one_engine_does(served, args: dict[str, Any]) -> None:
    """The controller checks a request (`asks`) in the words one engine uses, one request or a unit of two."""
    from engine.dp.messages import asks
    from engine.request_units import submit_unit

    engine, _ = served
    args = {"max_new_tokens": 1, **args}
    with pytest.raises(InvalidRequest) as one:
        engine.submit(**args)
    with pytest.raises(InvalidRequest) as group:
        asks([args])
    assert group.value.lines() == one.value.lines()
    unit = [args, {"prompt_or_ids": "ok", "max_new_tokens": 1}]
    with pytest.raises(InvalidRequest) as one_unit:
        submit_unit(engine, unit)
    with pytest.raises(InvalidRequest) as group_unit:
        asks(unit)
    assert group_unit.value.lines() == one_unit.value.lines()
