"""The described API: request bodies from the request model, answer types that match, and a fuzzer over it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from engine.engine import Engine
from engine.http.app import create_app
from engine.http.engine_backend import EngineBackend

pytestmark = pytest.mark.slow  # starts processes or servers: `make test-fast` leaves it out

KEY = "openapi-admin-key"


@pytest.fixture(scope="module")
def app() -> Iterator[object]:
    # a short context keeps the fuzzer's token budgets cheap: longer ones are refused at once
    engine = Engine.from_args(
        ["--max-total-tokens", "512", "--context-length", "48", "--admin-api-key", KEY, "--enable-hierarchical-cache"]
    )
    try:
        yield create_app(EngineBackend(engine))
    finally:
        engine.shutdown()


def test_request_bodies_are_described_from_the_request_model(app) -> None:
    """/generate and the /v1 routes declare their bodies; the bounds are the model's; /metrics is text."""
    spec = TestClient(app).get("/openapi.json").json()
    body = spec["paths"]["/generate"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["properties"]["temperature"]["maximum"] == 100
    assert body["properties"]["sampling_params"]["properties"]["seed"]["anyOf"][0]["maximum"] == 2**63 - 1
    ids = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1}, "minItems": 1}
    assert body["properties"]["input_ids"]["anyOf"][0] == ids
    completions = spec["paths"]["/v1/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert ids in completions["properties"]["prompt"]["anyOf"]
    chat = spec["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert "messages" in chat["required"] and "max_tokens" in chat["properties"] and "n" in chat["properties"]
    metrics = spec["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    assert list(metrics) == ["text/plain"]


CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


def test_no_input_gets_a_server_error_or_an_undescribed_answer(app) -> None:
    """Generated requests to every described route get no 5xx and answers that match the description."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/generate", "/v1/completions", "/v1/chat/completions", "/metrics"}
    answered: dict[str, set[int]] = {}
    for operation in operations:
        # the replica routes with the admin key (a single engine answers 404); other admin routes
        # without it, so random overrides and storage directories are refused, not applied
        auth = {"Authorization": f"Bearer {KEY}"} if operation.path.startswith("/replicas/") else {}
        _fuzz(operation, auth, answered.setdefault(operation.path, set()))
    for path in ("/generate", "/v1/completions", "/v1/chat/completions"):
        assert answered[path] == {2, 4}, (path, answered[path])  # some generated bodies ran, others were refused


def _fuzz(operation: Any, auth: dict[str, str], classes: set[int]) -> None:
    """Call one operation with generated requests, recording the class (2, 4, ...) of every answer."""

    @given(case=operation.as_strategy())
    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None, derandomize=True)
    def call(case: Any) -> None:
        response = case.call_and_validate(checks=CHECKS, headers=auth)
        classes.add(response.status_code // 100)

    call()


def _body_schema(spec: dict[str, Any], path: str) -> dict[str, Any]:
    return spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/generate", {"text": ""}),
        ("/generate", {"text": ["a", ""]}),
        ("/generate", {"input_ids": []}),
        ("/generate", {"input_ids": [[1], []]}),
        ("/v1/completions", {"prompt": ""}),
        ("/v1/completions", {"prompt": []}),
        ("/v1/completions", {"prompt": [""]}),
        ("/v1/completions", {"prompt": [[]]}),
        ("/config/overrides", {}),
    ],
)
def test_the_schema_refuses_what_the_server_refuses(app, path: str, body: dict[str, Any]) -> None:
    """An empty prompt, empty token ids and an override of nothing are refused by the server and by the schema."""
    import jsonschema

    client = TestClient(app)
    schema = _body_schema(client.get("/openapi.json").json(), path)
    assert not jsonschema.Draft202012Validator(schema).is_valid(body)
    r = client.post(path, json=body, headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code in (400, 422), r.text


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/generate", {"text": "a", "max_new_tokens": 1}),
        ("/generate", {"input_ids": [[1], [2]], "max_new_tokens": 1}),
        ("/v1/completions", {"prompt": ["a"], "max_tokens": 1}),
        ("/v1/completions", {"prompt": [1], "max_tokens": 1}),
    ],
)
def test_the_shortest_prompts_the_schema_allows_are_served(app, path: str, body: dict[str, Any]) -> None:
    """One character or one token id is a prompt for the schema and for the server."""
    import jsonschema

    client = TestClient(app)
    assert jsonschema.Draft202012Validator(_body_schema(client.get("/openapi.json").json(), path)).is_valid(body)
    assert client.post(path, json=body).status_code == 200
