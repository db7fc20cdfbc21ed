"""`sample()` and the native sampling parameters, from the function up to /generate."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

import attrs
import pytest
import torch
from fastapi.testclient import TestClient

from engine.request_params import MAX_SEED, PARAM_KEY, structure_params
from engine.sampling import SamplingParams, penalised, sample
from engine.tokenizer import ByteTokenizer

pytestmark = pytest.mark.server_args_shared


@attrs.define
class FakeReq:
    params: SamplingParams
    prompt: list[int] = attrs.Factory(list)
    output: list[int] = attrs.Factory(list)
    generator: torch.Generator = attrs.Factory(lambda: torch.Generator().manual_seed(0))


LOGITS = torch.tensor([3.0, 2.9, 2.8, -1.0, 0.5])


def draws(params: SamplingParams, n: int = 200) -> set[int]:
    req = FakeReq(params)
    return {sample(LOGITS, req) for _ in range(n)}


def test_greedy_is_argmax_at_temperature_zero_and_top_k_one() -> None:
    """temperature 0 and top_k=1 both pick the argmax, at any temperature."""
    assert draws(SamplingParams(temperature=0.0)) == {0}
    assert draws(SamplingParams(temperature=5.0, top_k=1)) == {0}


@pytest.mark.parametrize(
    ("params", "allowed"),
    [
        (SamplingParams(temperature=1.0, top_k=2), {0, 1}),
        (SamplingParams(temperature=1.0, top_p=0.5), {0, 1}),
        (SamplingParams(temperature=1.0, min_p=0.8), {0, 1, 2}),
        (SamplingParams(temperature=1.0), {0, 1, 2, 3, 4}),
    ],
)
def test_filters_keep_only_their_tokens(params: SamplingParams, allowed: set[int]) -> None:
    """top_k, top_p and min_p draw only from the tokens they keep; no filter can draw any token."""
    got = draws(params, 2000)
    assert got <= allowed and (len(got) > 1 or len(allowed) == 1)


def test_penalties_change_the_logits_of_seen_tokens() -> None:
    """repetition divides a positive logit, frequency subtracts per use, presence once per token."""
    rep = penalised(LOGITS, SamplingParams(repetition_penalty=2.0), [0], [3])
    assert rep[0] == pytest.approx(1.5) and rep[3] == pytest.approx(-2.0) and rep[1] == pytest.approx(2.9)
    freq = penalised(LOGITS, SamplingParams(frequency_penalty=1.0), [], [1, 1])
    assert freq[1] == pytest.approx(0.9)
    pres = penalised(LOGITS, SamplingParams(presence_penalty=1.0), [], [1, 1])
    assert pres[1] == pytest.approx(1.9)


@pytest.fixture(scope="module")
def http() -> Iterator[TestClient]:
    from engine.engine import Engine
    from engine.http.app import create_app
    from engine.http.engine_backend import EngineBackend
    from runtime import override_server_args

    with override_server_args(max_total_tokens=1024) as ctx:
        engine = Engine(ctx.record)
        try:
            yield TestClient(create_app(EngineBackend(engine)))
        finally:
            engine.shutdown(unpublish=False)


def gen(http: TestClient, **params: object) -> dict:
    r = http.post("/generate", json={"text": "sampling", "sampling_params": {"max_new_tokens": 12, **params}})
    assert r.status_code == 200, r.text
    return r.json()


def test_generate_greedy_top_k_equals_temperature_zero(http: TestClient) -> None:
    """top_k=1 at temperature 1 gives the temperature-0 tokens."""
    assert gen(http, temperature=1.0, top_k=1, seed=5)["output_ids"] == gen(http, temperature=0)["output_ids"]


def test_generate_seed_and_filters(http: TestClient) -> None:
    """The same seed repeats; a tiny top_p is greedy; a penalty changes the greedy tokens."""
    greedy = gen(http, temperature=0, ignore_eos=True)["output_ids"]
    assert gen(http, temperature=1.0, seed=9)["output_ids"] == gen(http, temperature=1.0, seed=9)["output_ids"]
    assert gen(http, temperature=1.0, top_p=1e-6, seed=1, ignore_eos=True)["output_ids"] == greedy
    assert gen(http, temperature=1.0, min_p=1.0, seed=1, ignore_eos=True)["output_ids"] == greedy
    assert gen(http, temperature=0, repetition_penalty=5.0, ignore_eos=True)["output_ids"] != greedy
    assert gen(http, temperature=0, presence_penalty=2.0, ignore_eos=True)["output_ids"] != greedy


def test_generate_stop_token_ids_and_ignore_eos(http: TestClient) -> None:
    """A stop token id ends the output on it with finish_reason stop."""
    greedy = gen(http, temperature=0, ignore_eos=True)["output_ids"]
    out = gen(http, temperature=0, ignore_eos=True, stop_token_ids=[greedy[3]])
    assert out["output_ids"] == greedy[: greedy.index(greedy[3]) + 1]
    assert out["meta_info"]["finish_reason"] == "stop"


def test_generate_stop_strings_stop_at_the_first_occurrence(http: TestClient) -> None:
    """A stop string ends generation where it first appears: the text stops before it, fewer tokens run."""
    whole = gen(http, temperature=0, ignore_eos=True)
    stop = whole["text"][3:5]
    out = gen(http, temperature=0, ignore_eos=True, stop=stop)
    assert out["text"] == whole["text"][: whole["text"].find(stop)]
    assert out["meta_info"]["finish_reason"] == "stop"
    assert len(out["output_ids"]) < len(whole["output_ids"])
    r = http.post(
        "/generate",
        json={
            "text": "sampling",
            "stream": True,
            "sampling_params": {"max_new_tokens": 12, "ignore_eos": True, "stop": [stop]},
        },
    )
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    assert "".join(e.get("delta", "") for e in events) == out["text"]
    # the token ids end with the text, streamed or not: the stop string's tokens ran but are not the answer
    assert events[-1]["output_ids"] == out["output_ids"] == whole["output_ids"][: len(out["output_ids"])]
    assert ByteTokenizer().decode(out["output_ids"]) == out["text"]  # the tiny model's tokenizer
    assert out["meta_info"]["completion_tokens"] > len(out["output_ids"])


@pytest.mark.parametrize(
    ("text", "ids", "count"),
    [
        ("ab", [97, 98, 83, 84], 2),  # "abST" cut before "ST"
        ("", [83, 84], 0),
        ("a\u00e9", [97, 0xC3, 0xA9, 83], 3),  # a two-byte character takes both its tokens
        ("a", [97, 0xC3, 0xA9], 1),
    ],
)
def test_tokens_spelling_a_cut_text(text: str, ids: list[int], count: int) -> None:
    """The fewest tokens whose decoding starts with the cut text."""
    from engine.results import tokens_spelling

    assert tokens_spelling(text, ids, ByteTokenizer()) == count


def test_generate_unknown_key_and_bad_values_are_422(http: TestClient) -> None:
    """An unknown sampling key names the nearest known one; a value out of range names its field."""
    r = http.post("/generate", json={"text": "x", "sampling_params": {"top_kk": 3}})
    assert r.status_code == 422
    assert r.json()["errors"] == ["$.sampling_params.top_kk: unknown parameter 'top_kk' -- did you mean 'top_k'?"]
    r = http.post("/generate", json={"text": "x", "sampling_params": {"top_p": 2}})
    assert r.status_code == 422 and r.json()["errors"] == ["$.sampling_params.top_p: must be in (0, 1] (got 2)"]


def _extremes(field: attrs.Attribute) -> list[float]:
    """The edge values the request model accepts for one numeric field, from its declared bound.

    A closed end is itself a value; next to the low end, the smallest floats above it
    (5e-324 and 1e-300 above 0, both 0 in float32); next to the top end, the float below
    it. A bound with no top (top_k) gives the largest seed-sized integer.
    """
    check = field.metadata[PARAM_KEY].check
    if hasattr(check, "off"):
        return [check.off, check.low, check.low + 1, MAX_SEED]
    low, high = check.low, check.high
    near = [math.nextafter(low, math.inf), low + 1e-300, math.nextafter(high, -math.inf)]
    return sorted({*near, *([] if check.low_open else [low]), *([] if check.high_open else [high])})


# every sampling parameter the sampler's arithmetic reads; the rest end generation or seed it
NUMERIC = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "frequency_penalty", "presence_penalty")
EXTREMES = [(f.name, v) for f in attrs.fields(SamplingParams) if f.name in NUMERIC for v in _extremes(f)]


def test_extremes_cover_every_numeric_sampling_parameter() -> None:
    """The table below runs every numeric sampling parameter, and each value is one the request model takes."""
    fields = {f.name for f in attrs.fields(SamplingParams) if str(f.type) in ("float", "int")}
    assert fields - {"max_new_tokens"} == set(NUMERIC) == {name for name, _ in EXTREMES}
    for name, value in EXTREMES:
        structure_params([(f"$.{name}", name, value)])


@pytest.mark.parametrize("temperature", [0.0, 0.9, 100.0])
@pytest.mark.parametrize(("name", "value"), EXTREMES)
def test_every_accepted_extreme_value_samples(name: str, value: float, temperature: float) -> None:
    """A value at the edge of what the request model accepts draws a token, with penalties on seen tokens.

    top_p of 1e-300 keeps the most likely token; a repetition_penalty of 1e-300 (0 in
    float32) keeps the logits finite rather than dividing them to inf.
    """
    params = SamplingParams(**{"temperature": temperature, name: value})
    for logits in (LOGITS, torch.tensor([1e30, -1e30, 0.0, 3e38, -3e38])):
        req = FakeReq(params, prompt=[0, 1, 3], output=[0, 1, 1, 3, 4])
        token = sample(logits, req)
        assert 0 <= token < logits.shape[-1]
        assert torch.isfinite(penalised(logits, params, req.prompt, req.output)).all()


def test_a_nucleus_smaller_than_float32_keeps_the_top_token() -> None:
    """top_p that is 0 in float32 decodes greedily, as the smallest top_p float32 holds does."""
    assert draws(SamplingParams(temperature=1.0, top_p=1e-300)) == {0}
    assert draws(SamplingParams(temperature=1.0, top_p=5e-324)) == {0}


@pytest.mark.parametrize(("name", "value"), EXTREMES)
def test_every_accepted_extreme_value_is_served(http: TestClient, name: str, value: float) -> None:
    """/generate and /v1/completions answer 200 at every edge value, sampled and repeating the prompt."""
    r = http.post(
        "/generate",
        json={"text": "hello hello hello", "sampling_params": {"max_new_tokens": 3, "temperature": 0.9, name: value}},
    )
    assert r.status_code == 200, r.text
    r = http.post("/v1/completions", json={"prompt": "hello hello hello", "max_tokens": 3, name: value})
    assert r.status_code == 200, r.text
