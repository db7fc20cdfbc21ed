"""Validation at the edge: body size, JSON shape and field limits answer 4xx naming the limit; nothing gives a 5xx."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.engine import Engine
from engine.http.app import create_app
from engine.http.engine_backend import EngineBackend
from engine.http.limits import nesting_depth

KEY = "edge-admin-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[Engine, TestClient]]:
    engine = Engine.from_args(
        [
            "--max-total-tokens",
            "512",
            "--enable-hierarchical-cache",
            "--admin-api-key",
            KEY,
            "--max-request-body-bytes",
            "4096",
            "--max-prompt-chars",
            "200",
        ]
    )
    try:
        yield engine, TestClient(create_app(EngineBackend(engine)))
    finally:
        engine.shutdown()


def post(client: TestClient, path: str, raw: bytes, **headers: str) -> tuple[int, dict]:
    r = client.post(path, content=raw, headers={"content-type": "application/json", **headers})
    return r.status_code, r.json()


def test_a_body_over_the_limit_is_413_from_its_content_length(served) -> None:
    """A declared length over max_request_body_bytes is refused before the body is read."""
    _, client = served
    status, body = post(client, "/generate", b"x" * 5000)
    assert status == 413
    assert body["detail"] == (
        "the request body of 5000 bytes is larger than 'max_request_body_bytes' (4096) "
        "-- send a smaller body, or raise --max-request-body-bytes"
    )


def test_a_streamed_body_over_the_limit_is_413_once_it_passes_it(served) -> None:
    """A chunked body without a length is cut off as soon as the bytes read pass the limit."""
    _, client = served
    sent: list[int] = []

    def chunks() -> Iterator[bytes]:
        for _ in range(100):
            sent.append(1)
            yield b" " * 1024

    r = client.post("/generate", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert r.json()["detail"].startswith("the request body of more than 4096 bytes is larger than")


@pytest.mark.parametrize(
    ("raw", "status", "line"),
    [
        (b"[" * 40 + b"]" * 40, 422, "$: nested 40 levels deep, more than 'max_json_depth' (32) allows"),
        (
            b'{"text": "a", "seed": ' + b"9" * 30 + b"}",
            422,
            "$.seed: an integer of 30 digits is longer than 'max_json_integer_digits' (24) allows",
        ),
        (b'{"text": "a", "temperature": NaN}', 422, "$.temperature: expected a finite number (got nan)"),
        (b'{"text": "a", "temperature": 1e999}', 422, "$.temperature: expected a finite number (got inf)"),
        (
            b'{"text": "\\ud800"}',
            422,
            "$.text: the string holds a lone UTF-16 surrogate (not valid unicode) -- send valid text",
        ),
        (b'{"text": "\xff\xfe"}', 400, None),
        (b'{"text": ', 400, None),
        (
            b'{"text": "a", "max_new_tokens": 1, "max_new_tokens": 5}',
            422,
            "$.max_new_tokens: the key is given twice in one object -- give each key once",
        ),
        (
            b'{"text": "a", "sampling_params": {"top_k": 1, "top_p": 1, "top_k": 2}}',
            422,
            "$.sampling_params.top_k: the key is given twice in one object -- give each key once",
        ),
    ],
    ids=["deep", "huge_int", "nan", "inf", "surrogate", "bad_utf8", "truncated", "key_twice", "nested_key_twice"],
)
def test_malformed_bodies_are_client_errors(served, raw: bytes, status: int, line: str | None) -> None:
    """Deep nesting, huge integers, non-finite numbers, invalid unicode and a repeated key get 4xx with the reason,
    never 500 (nor, for the key, a silent pick of one of its values)."""
    _, client = served
    got, body = post(client, "/generate", raw)
    assert got == status
    if line is not None:
        assert body["errors"] == [line]
    else:
        assert "not valid" in body["detail"]


@pytest.mark.parametrize(
    ("fields", "line"),
    [
        ({"seed": 2**64}, "$.seed: must be in [0, 9223372036854775807] (got 18446744073709551616)"),
        ({"seed": -1}, "$.seed: must be in [0, 9223372036854775807] (got -1)"),
        ({"temperature": 1000}, "$.temperature: must be in [0, 100] (got 1000)"),
        ({"timeout_s": 0}, "$.timeout_s: must be in (0, 86400] (got 0)"),
        ({"timeout_s": 601}, "$.timeout_s: must be at most 'request_timeout_s' (600) (got 601.0)"),
        ({"text": "x" * 201}, "$.text: 201 characters, more than 'max_prompt_chars' (200) -- shorten the prompt"),
        ({"text": ["x"] * 257}, "$.text: 257 prompts, more than 'max_batch_items' (256) -- split the batch"),
    ],
    ids=["seed_big", "seed_negative", "temperature_big", "timeout_zero", "timeout_over", "long_prompt", "batch"],
)
def test_out_of_range_fields_are_422(served, fields: dict, line: str) -> None:
    """Each generate field out of its range is one `$.generate.field` line; nothing reaches the engine."""
    engine, client = served
    before = engine.scheduler.counters["finished"]
    got, body = post(client, "/generate", json.dumps({"text": "hi", **fields}).encode())
    assert (got, body["errors"]) == (422, [line])
    assert engine.scheduler.counters["finished"] == before


def test_long_token_id_lists_are_checked_before_anything_else(served) -> None:
    """input_ids count against max_prompt_chars too, before they are converted or checked against the vocabulary."""
    _, client = served
    got, body = post(client, "/generate", json.dumps({"input_ids": [1] * 201}).encode())
    assert body["errors"] == ["$.input_ids: 201 token ids, more than 'max_prompt_chars' (200) -- shorten the prompt"]


def test_nesting_depth_ignores_brackets_inside_strings() -> None:
    """Brackets in string literals (escaped quotes included) do not count as nesting."""
    assert nesting_depth(b'[{"a": "[[[\\"]]]"}]') == 2
    assert nesting_depth(b"1") == 0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
GENERATE_KEYS = [
    "text",
    "input_ids",
    "max_new_tokens",
    "temperature",
    "seed",
    "ignore_eos",
    "sampling_params",
    "timeout_s",
]
bodies = st.one_of(
    json_values.map(lambda v: json.dumps(v).encode()),
    st.dictionaries(st.sampled_from(GENERATE_KEYS), json_values, max_size=5).map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=64),
)
ROUTES = [
    ("POST", "/generate"),
    ("PUT", "/hicache/storage-backend"),
    ("POST", "/config/overrides"),
    ("POST", "/replicas/0/restart"),
    ("POST", "/replicas/0/resync"),
    ("GET", "/server_info"),
    ("GET", "/health"),
]


def _short(raw: bytes) -> bytes:
    """The body with any token budget capped at 8: the property is about the answer's class, not throughput."""
    try:
        data = json.loads(raw)
    except ValueError:
        return raw
    if not isinstance(data, dict):
        return raw
    for holder in (data, data.get("sampling_params")):
        if isinstance(holder, dict):
            for key in ("max_new_tokens", "max_tokens"):
                if isinstance(holder.get(key), int) and holder[key] > 8:
                    holder[key] = 8
    return json.dumps(data).encode()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(route=st.sampled_from(ROUTES), raw=bodies, admin=st.booleans())
def test_generated_bodies_never_get_a_server_error(served, route: tuple[str, str], raw: bytes, admin: bool) -> None:
    """Any JSON (or bytes) at any route is answered 2xx or 4xx, and the server stays healthy."""
    engine, client = served
    method, path = route
    headers = {"content-type": "application/json", **(AUTH if admin else {})}
    raw = _short(raw)
    r = client.request(method, path, content=raw, headers=headers)
    assert r.status_code < 500, (path, raw, r.status_code, r.text)
    if path == "/hicache/storage-backend" and r.status_code == 200:
        client.delete(path, headers=AUTH)
    assert client.get("/health").json() == {"status": "ok", "queued": 0, "running": 0}


def _unknown_keys(count: int) -> dict[str, int]:
    return {f"k{i}": 0 for i in range(count)}


@pytest.mark.parametrize(
    ("path", "body", "first"),
    [
        ("/generate", {"text": "hi", **_unknown_keys(300)}, "$.k0: unknown parameter 'k0'"),
        ("/generate", {"text": "hi", "sampling_params": _unknown_keys(300)}, "$.sampling_params.k0: unknown parameter"),
        ("/hicache/storage-backend", _unknown_keys(300), "$.memory.k0: unknown field 'k0'"),
    ],
    ids=["top_level", "sampling_params", "attach"],
)
def test_a_refusal_lists_at_most_twenty_problems_and_counts_the_rest(served, path: str, body: dict, first: str) -> None:
    """300 unknown keys are answered with the first 20 problems and one line counting the other 280."""
    _, client = served
    r = client.request("PUT" if "hicache" in path else "POST", path, json=body, headers=AUTH)
    assert r.status_code == 422
    errors = r.json()["errors"]
    assert len(errors) == 21 and errors[0].startswith(first) and errors[-1] == "... and 280 more problems"


def test_unknown_names_past_the_cap_are_counted_without_a_suggestion(monkeypatch: pytest.MonkeyPatch) -> None:
    """The request model works out a suggestion for the 20 unknown names it lists, and only counts the rest."""
    import engine.request_params as request_params
    from engine.errors import InvalidRequest

    asked: list[str] = []
    real = request_params.did_you_mean
    monkeypatch.setattr(request_params, "did_you_mean", lambda name, names: asked.append(name) or real(name, names))
    with pytest.raises(InvalidRequest) as caught:
        request_params.structure_params((f"$.k{i}", f"k{i}", 0) for i in range(1000))
    assert len(caught.value.problems) == 20 and caught.value.omitted == 980 and len(asked) == 20
    assert str(caught.value).endswith("\n  ... and 980 more problems")


def test_the_cap_applies_to_every_problem_answer() -> None:
    """An HTTPProblem built with any number of lines keeps 20 and counts the rest, including ones never made."""
    from engine.http.problems import HTTPProblem

    lines = [f"$.f{i}: bad" for i in range(25)]
    assert HTTPProblem(422, "x", errors=lines).errors == [*lines[:20], "... and 5 more problems"]
    assert HTTPProblem(422, "x", errors=lines[:20]).errors == lines[:20]
    assert HTTPProblem(422, "x", errors=lines[:3], omitted=1).errors == [*lines[:3], "... and 1 more problem"]


@pytest.mark.parametrize(
    ("path", "raw", "line"),
    [
        ("/generate", b"null", "$: expected an object, got null"),
        ("/generate", b"[1]", "$: expected an object, got array"),
        ("/generate", b'"text"', "$: expected an object, got string"),
        ("/generate", b"1.5", "$: expected an object, got number"),
        ("/generate", b"true", "$: expected an object, got boolean"),
        ("/generate", b'{"text": "x", "sampling_params": [1]}', "$.sampling_params: expected an object (got array)"),
        (
            "/hicache/storage-backend",
            b'{"hicache_storage_backend": "file", "hicache_storage_backend_extra_config_json": "7"}',
            # the options' one check (`checked_attach`) quotes the text the client sent
            "$.memory.hicache_storage_backend_extra_config: expected an object, got '7' "
            '-- pass an object like {"dir": "/path"}',
        ),
    ],
    ids=["null", "array", "string", "number", "boolean", "sampling_params", "attach_extra"],
)
def test_a_value_of_the_wrong_json_type_is_named_by_its_json_type(served, path: str, raw: bytes, line: str) -> None:
    """A refusal names the JSON type the client sent (null, array...), never a Python class (NoneType, list)."""
    _, client = served
    r = client.request("PUT" if "hicache" in path else "POST", path, content=raw, headers={**AUTH})
    assert r.status_code == 422 and r.json()["errors"] == [line]


def _refused_overrides(client: TestClient) -> str:
    return next(
        line
        for line in client.get("/metrics").text.splitlines()
        if line.startswith('sgconf:config_overrides_total{result="refused",source="http.config_overrides"}')
    )


@pytest.mark.parametrize("path", ["/generate", "/v1/completions", "/v1/chat/completions", "/config/overrides"])
def test_a_client_gone_mid_body_is_499_and_no_refusal(served, path: str) -> None:
    """A client that closes its connection while sending the body gets 499 (nobody reads it), not a 500 with a
    traceback in the log, and an admin who went away mid-override is not counted as a refused change."""
    import asyncio

    _, client = served
    before = _refused_overrides(client)
    incoming = [{"type": "http.request", "body": b'{"text"', "more_body": True}, {"type": "http.disconnect"}]
    sent: list[dict] = []

    async def receive() -> dict:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    headers = [(b"content-type", b"application/json"), (b"content-length", b"100"), (b"host", b"x")]
    headers.append((b"authorization", AUTH["Authorization"].encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }
    asyncio.run(client.app(scope, receive, send))
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 499
    assert _refused_overrides(client) == before


def test_a_key_given_twice_is_refused_on_every_route(served) -> None:
    """/v1 names the parameter in OpenAI's error body, an override is refused whole: no route picks one value."""
    engine, client = served
    status, body = post(client, "/v1/completions", b'{"prompt": "a", "max_tokens": 1, "max_tokens": 5}')
    assert (status, body["error"]["param"]) == (400, "max_tokens")
    assert body["error"]["message"] == "$.max_tokens: the key is given twice in one object -- give each key once"
    generation = engine.context.generation
    raw = b'{"stream_interval": 2, "stream_interval": 3}'
    status, body = post(client, "/config/overrides", raw, **AUTH)
    assert (status, body["errors"]) == (
        422,
        ["$.stream_interval: the key is given twice in one object -- give each key once"],
    )
    assert engine.context.generation == generation
