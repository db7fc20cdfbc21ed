"""The OpenAI-compatible routes, driven by the official `openai` client, against one engine and a replica group."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from fastapi.testclient import TestClient

from engine.http.app import GENERATION_HEADER
from engine.http.openai_routes import render_chat
from engine.streaming import StopCutter

if TYPE_CHECKING:  # imported where used: the client takes a second to import, and `make test-fast` collects this file
    import openai

pytestmark = [pytest.mark.server_args_shared, pytest.mark.slow]
FLAGS = {"max_total_tokens": 1024, "page_size": 4}


@pytest.fixture(scope="module")
def client(http: TestClient) -> openai.OpenAI:
    import openai

    return openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=http, max_retries=0)


def test_models_lists_the_served_model(client: openai.OpenAI) -> None:
    """GET /v1/models lists the one model under its served name."""
    models = client.models.list()
    assert [m.id for m in models.data] == ["tiny"]


def test_completion_schema_and_usage(client: openai.OpenAI) -> None:
    """A completion has an id, object, created, one choice per prompt and token usage."""
    out = client.completions.create(model="tiny", prompt="hello", max_tokens=5, temperature=0)
    assert out.id.startswith("cmpl-") and out.object == "text_completion" and out.created > 0
    assert len(out.choices) == 1 and out.choices[0].finish_reason in ("length", "stop")
    assert out.usage is not None and out.usage.prompt_tokens == len(b"hello")
    assert out.usage.total_tokens == out.usage.prompt_tokens + out.usage.completion_tokens


def test_prompt_forms_and_n(client: openai.OpenAI) -> None:
    """A list of strings, token ids and n give one choice per prompt and sample, greedy ones equal."""
    many = client.completions.create(model="tiny", prompt=["ab", "cd"], max_tokens=3, temperature=0, n=2)
    assert [c.index for c in many.choices] == [0, 1, 2, 3]
    assert many.choices[0].text == many.choices[1].text
    ids = client.completions.create(model="tiny", prompt=list(b"ab"), max_tokens=3, temperature=0)
    assert ids.choices[0].text == many.choices[0].text


def test_stream_text_equals_the_whole_text(client: openai.OpenAI) -> None:
    """At temperature 0 the streamed pieces add up to the non-streamed text, with usage and a finish reason."""
    whole = client.completions.create(model="tiny", prompt="stream me", max_tokens=12, temperature=0)
    chunks = list(
        client.completions.create(
            model="tiny",
            prompt="stream me",
            max_tokens=12,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens  # type: ignore[union-attr]


def test_chat_and_chat_stream_agree(client: openai.OpenAI) -> None:
    """Chat renders the messages through the template; its stream equals the whole reply."""
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    whole = client.chat.completions.create(model="tiny", messages=messages, max_tokens=8, temperature=0)  # type: ignore[arg-type]
    assert whole.object == "chat.completion" and whole.choices[0].message.role == "assistant"
    prompt = render_chat(messages, None)
    assert whole.usage is not None and whole.usage.prompt_tokens == len(prompt.encode())
    chunks = list(
        client.chat.completions.create(
            model="tiny",
            messages=messages,
            max_tokens=8,
            temperature=0,  # type: ignore[arg-type]
            stream=True,
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason


def test_seed_makes_sampling_repeatable(client: openai.OpenAI) -> None:
    """The same seed at temperature 1 gives the same text; the engine's sampling is seeded per request."""
    a = client.completions.create(model="tiny", prompt="x", max_tokens=10, temperature=1, seed=7)
    b = client.completions.create(model="tiny", prompt="x", max_tokens=10, temperature=1, seed=7)
    assert a.choices[0].text == b.choices[0].text


def test_top_p_and_penalties_are_honoured(client: openai.OpenAI) -> None:
    """A tiny top_p keeps only the most likely token, so it samples the greedy text; a penalty changes it."""
    greedy = client.completions.create(model="tiny", prompt="p", max_tokens=10, temperature=0).choices[0].text
    nucleus = client.completions.create(model="tiny", prompt="p", max_tokens=10, temperature=1, top_p=1e-6, seed=3)
    assert nucleus.choices[0].text == greedy
    penalised = client.completions.create(model="tiny", prompt="p", max_tokens=10, temperature=0, frequency_penalty=2)
    assert penalised.choices[0].text != greedy


def test_stop_cuts_the_text(client: openai.OpenAI) -> None:
    """A stop string taken from the greedy text stops generation there, with finish_reason stop, streamed or not."""
    whole = client.completions.create(
        model="tiny", prompt="stop", max_tokens=12, temperature=0, extra_body={"ignore_eos": True}
    )
    full = whole.choices[0].text
    stop = full[3:5]
    cut = client.completions.create(
        model="tiny", prompt="stop", max_tokens=12, temperature=0, stop=[stop], extra_body={"ignore_eos": True}
    )
    assert cut.choices[0].text == full[: full.find(stop)] and cut.choices[0].finish_reason == "stop"
    assert cut.usage is not None and whole.usage is not None
    assert cut.usage.completion_tokens < whole.usage.completion_tokens  # it stopped, not cut afterwards
    chunks = list(
        client.completions.create(model="tiny", prompt="stop", max_tokens=12, temperature=0, stop=stop, stream=True)
    )
    assert "".join(c.choices[0].text for c in chunks) == cut.choices[0].text


def test_n_choices_stream_each_with_its_index(client: openai.OpenAI) -> None:
    """n > 1 streams: every choice's pieces add up to its non-streamed text, and each ends with a finish reason."""
    whole = client.completions.create(model="tiny", prompt=["ab", "cd"], max_tokens=6, temperature=0.8, n=2, seed=7)
    chunks = list(
        client.completions.create(
            model="tiny", prompt=["ab", "cd"], max_tokens=6, temperature=0.8, n=2, seed=7, stream=True
        )
    )
    texts: dict[int, str] = {}
    reasons: dict[int, str] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + choice.text
            if choice.finish_reason is not None:
                reasons[choice.index] = choice.finish_reason
    assert texts == {c.index: c.text for c in whole.choices}
    assert sorted(reasons) == [0, 1, 2, 3]
    chat = list(
        client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], n=3, max_tokens=4, stream=True
        )
    )
    assert {c.choices[0].index for c in chat if c.choices} == {0, 1, 2}


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"top_p": 0}, "top_p"),
        ({"logprobs": 2}, "logprobs"),
        ({"logprobs": 0}, "logprobs"),  # 0 asks for the sampled token's own logprob
        ({"presence_penalty": 3.0}, "presence_penalty"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"temperature": 300}, "temperature"),
        ({"extra_body": None, "n": 0}, "n"),
    ],
)
def test_bad_parameters_are_400_in_openai_error_body(client: openai.OpenAI, extra: dict, param: str) -> None:
    """Parameters the engine cannot honour are refused with 400 naming the parameter."""
    import openai

    extra.pop("extra_body", None)
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="tiny", prompt="x", **extra)
    assert info.value.status_code == 400
    assert info.value.body["param"] == param  # type: ignore[index]


def test_unknown_key_and_model(http: TestClient) -> None:
    """An unknown key is a 400 with a suggestion; an unknown model is a 404 model_not_found."""
    r = http.post("/v1/completions", json={"model": "tiny", "prompt": "x", "max_token": 3})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == "max_token" and "max_tokens" in err["message"]
    r = http.post("/v1/completions", json={"model": "gpt-9", "prompt": "x"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_every_answer_names_its_config_generation(http: TestClient) -> None:
    """Every response carries the config generation header; /generate also has it in its meta."""
    r = http.post("/generate", json={"text": "g", "max_new_tokens": 2})
    assert r.status_code == 200
    assert int(r.headers[GENERATION_HEADER]) == r.json()["meta_info"]["config_generation"]
    assert GENERATION_HEADER in http.get("/v1/models").headers


def test_openapi_docs_are_served(http: TestClient) -> None:
    """/docs serves the OpenAPI page and /openapi.json lists the OpenAI routes."""
    assert http.get("/docs").status_code == 200
    assert "/v1/chat/completions" in http.get("/openapi.json").json()["paths"]


@pytest.mark.parametrize(
    ("pieces", "stops", "sent"),
    [
        (["ab", "cX", "Yd"], ("XY",), ["ab", "c", ""]),
        (["aX", "b"], ("XY",), ["a", "Xb"]),
        (["hello"], (), ["hello"]),
    ],
)
def test_stop_cutter_holds_back_only_a_possible_stop(
    pieces: list[str], stops: tuple[str, ...], sent: list[str]
) -> None:
    """Text that could begin a stop string is held until it cannot; the match and after are never sent."""
    cutter = StopCutter(stops)
    out = [cutter.feed(p) for p in pieces]
    out[-1] += cutter.flush()
    assert out == sent


def test_openai_param_is_read_from_the_problem_path_not_the_rendered_line() -> None:
    """`param` is the top-level key of the first problem's path, however its message or the key reads."""
    from engine.errors import InvalidRequest
    from engine.http.openai_routes import _as_openai
    from engine.http.problems import HTTPProblem
    from sgconf.errors import Problem

    refused = InvalidRequest([Problem("$.a:b", "unknown parameter 'a:b'", "http")], header="invalid")
    assert _as_openai(refused).param == "a:b"
    assert _as_openai(InvalidRequest([Problem("$.stop[1]", "too long")])).param == "stop"
    assert _as_openai(InvalidRequest([Problem("$", "expected an object")])).param is None
    # lines with no problems behind them name no parameter, whatever they look like
    assert _as_openai(HTTPProblem(422, "bad", errors=["$.temperature: bad"])).param is None


def test_an_openai_error_keeps_the_headers_of_its_problem() -> None:
    """A busy engine's Retry-After and a body timeout's Connection: close reach the client in OpenAI's error shape."""
    from engine.errors import EngineBusy
    from engine.http.openai_routes import _as_openai, _openai_response
    from engine.http.problems import HTTPProblem

    busy = _openai_response(_as_openai(EngineBusy("busy", queued=3, running=4, retry_after_s=2.5)))
    assert busy.status_code == 409 and busy.headers["retry-after"] == "3"
    timeout = _openai_response(_as_openai(HTTPProblem(408, "slow body", headers={"Connection": "close"})))
    assert timeout.status_code == 408 and timeout.headers["connection"] == "close"
