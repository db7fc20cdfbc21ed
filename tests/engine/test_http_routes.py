"""Every route of the one HTTP app, answered the same by one engine and by a two-replica group.

Each test runs twice: against `EngineBackend` (one engine in this process) and against
`ReplicaGroupBackend` (a controller and two replica processes). Starting replicas is the
slow part, so each server lives for the whole module and every test leaves the config
as it found it (attach is followed by detach; generations are compared relatively).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.engine.serving import ADMIN_AUTH as AUTH
from tests.engine.serving import ADMIN_KEY as KEY

# the servers live for the module and own their context; each test leaves the config as it found it
pytestmark = [pytest.mark.server_args_shared, pytest.mark.slow]
OUTSIDE = "token id 999 is outside the vocabulary 0..255 of this model -- send ids from this model's tokenizer"
BEYOND = (
    "a prompt of 2040 tokens plus 9 new tokens exceeds the context length 2048 ('context_length')"
    " -- ask for at most 8 new tokens, or shorten the prompt"
)
FLAGS = {"max_total_tokens": 1024, "page_size": 4, "enable_hierarchical_cache": True, "admin_api_key": KEY}


@pytest.fixture(scope="module")
def client(http: TestClient) -> TestClient:
    """The suite's two-mode route client (`tests/engine/conftest.py`) on FLAGS."""
    return http


def generation(client: TestClient) -> int:
    return int(client.get("/server_info").json()["generation"])


def test_health_is_ok_with_counts(client: TestClient) -> None:
    """GET /health answers 200 with the status and the queued/running counts."""
    r = client.get("/health")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok" and body["queued"] == 0 and body["running"] == 0


def test_generate_returns_tokens_and_is_deterministic(client: TestClient) -> None:
    """POST /generate gives exactly max_new_tokens tokens with ignore_eos, the same ones every time."""
    body = {"text": "hello there", "max_new_tokens": 5, "ignore_eos": True}
    first = client.post("/generate", json=body)
    assert first.status_code == 200, first.text
    out = first.json()
    assert len(out["output_ids"]) == 5 and isinstance(out["text"], str)
    assert out["meta_info"]["prompt_tokens"] == len(b"hello there")
    assert out["meta_info"]["finish_reason"] == "length"
    assert client.post("/generate", json=body).json()["output_ids"] == out["output_ids"]
    by_ids = client.post("/generate", json={"input_ids": list(b"hello there"), "max_new_tokens": 5, "ignore_eos": True})
    assert by_ids.json()["output_ids"] == out["output_ids"]


@pytest.mark.parametrize(
    ("body", "status", "line"),
    [
        ({"text": "a", "max_new_tokens": 0}, 422, "$.max_new_tokens: must be in [1, 1048576] (got 0)"),
        (
            {"text": "a", "temprature": 0.5},
            422,
            "$.temprature: unknown parameter 'temprature' -- did you mean 'temperature'?",
        ),
        ({"max_new_tokens": 2}, 422, "$.text: give exactly one of 'text' (or 'prompt') and 'input_ids'"),
        ({"input_ids": [1, 999], "max_new_tokens": 2}, 422, f"$.input_ids: {OUTSIDE}"),
        ({"input_ids": [[1], [2, 999]], "max_new_tokens": 2}, 422, f"$.input_ids[1]: {OUTSIDE}"),
        ({"text": ["a", 1], "max_new_tokens": 2}, 422, "$.text[1]: expected a string (got 1)"),
        ({"text": "a", "prompt": "b"}, 422, "$.prompt: 'prompt' is given twice (also as $.text) -- keep one"),
        ({"input_ids": [1] * 2040, "max_tokens": 9}, 422, f"$.max_tokens: {BEYOND}"),
    ],
)
def test_generate_refuses_bad_bodies(client: TestClient, body: dict[str, Any], status: int, line: str | None) -> None:
    """Bad /generate bodies get 422 with one line per problem, at the item they are in; nothing runs."""
    r = client.post("/generate", json=body)
    assert r.status_code == status, r.text
    if line is not None:
        assert line in r.json()["errors"]
    assert client.get("/health").json()["running"] == 0


@pytest.mark.parametrize(("prompt", "at"), [([1, 999], "$.prompt"), ([[1], [2, 999]], "$.prompt[1]")])
def test_v1_refuses_a_token_id_outside_the_vocabulary_at_its_prompt(client: TestClient, prompt: Any, at: str) -> None:
    """/v1/completions names the prompt holding the id, with n choices each too, as the group does."""
    r = client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 1, "n": 2})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"] == f"{at}: {OUTSIDE}" and r.json()["error"]["param"] == "prompt"


def test_v1_refuses_a_prompt_too_long_for_the_context_at_max_tokens(client: TestClient) -> None:
    """The engine's refusal (a replica's, in a group) names OpenAI's parameter, as one engine's does."""
    r = client.post("/v1/completions", json={"prompt": [1] * 2040, "max_tokens": 9})
    assert (r.status_code, r.json()["error"]["param"]) == (400, "max_tokens"), r.text
    assert r.json()["error"]["message"] == f"$.max_tokens: {BEYOND}"


def test_generate_body_that_is_not_json_is_400(client: TestClient) -> None:
    """A body that does not parse is a 400 saying so."""
    r = client.post("/generate", content=b"{nope", headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert r.json()["detail"].startswith("the body is not valid JSON")


def test_server_info_reports_config_and_every_rank(client: TestClient) -> None:
    """GET /server_info: resolved config, generation, fingerprint, overrides, and every rank at one fingerprint."""
    info = client.get("/server_info").json()
    for key in ("config", "generation", "fingerprint", "overrides", "provenance", "startup_values", "dp_size", "ranks"):
        assert key in info, key
    assert info["config"]["schedule"]["page_size"] == 4
    assert info["config"]["serving"]["admin_api_key"] == "***"
    assert len(info["ranks"]) == info["dp_size"] + (info["dp_size"] > 1)
    assert {row["fingerprint"] for row in info["ranks"]} == {info["fingerprint"]}
    assert {row["generation"] for row in info["ranks"]} == {info["generation"]}


ADMIN_ROUTES = [
    ("GET", "/hicache/storage-backend"),
    ("PUT", "/hicache/storage-backend"),
    ("DELETE", "/hicache/storage-backend"),
    ("POST", "/config/overrides"),
    ("POST", "/replicas/0/restart"),
    ("POST", "/replicas/0/resync"),
]


@pytest.mark.parametrize(("method", "path"), ADMIN_ROUTES)
def test_admin_routes_need_the_admin_key(client: TestClient, method: str, path: str) -> None:
    """Without a bearer key 401, with a wrong one 403."""
    assert client.request(method, path).status_code == 401
    assert client.request(method, path, headers={"Authorization": "Bearer wrong"}).status_code == 403


def test_hot_override_applies_and_a_cold_one_changes_nothing(client: TestClient) -> None:
    """POST /config/overrides: a hot field applies at a new generation; a non-hot one is 422 and nothing changes."""
    before = generation(client)
    r = client.post("/config/overrides", json={"schedule_conservativeness": 0.5}, headers=AUTH)
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["status"], body["generation"], body["consistent"]) == ("applied", before + 1, True)
    assert body["fields"]["schedule_conservativeness"]["new"] == 0.5
    assert {row["generation"] for row in body["ranks"]} == {before + 1}
    r = client.post("/config/overrides", json={"page_size": 8}, headers=AUTH)
    assert r.status_code == 422
    assert any("$.schedule.page_size: " in line for line in r.json()["errors"])
    r = client.post("/config/overrides", json={}, headers=AUTH)
    assert (r.status_code, r.json()["detail"]) == (422, "no fields to override")
    assert generation(client) == before + 1
    r = client.post("/config/overrides", json={"schedule_conservativeness": 1.0}, headers=AUTH)
    assert r.status_code == 200


def test_attach_then_detach_storage(client: TestClient, tmp_path: Path) -> None:
    """PUT then DELETE /hicache/storage-backend: attached on every rank, then detached; a second detach is a no-op."""
    before = generation(client)
    body = {"hicache_storage_backend": "file", "hicache_storage_backend_extra_config_json": f'{{"dir": "{tmp_path}"}}'}
    r = client.put("/hicache/storage-backend", json=body, headers=AUTH)
    assert r.status_code == 200, r.text
    assert (r.json()["status"], r.json()["hicache_storage_backend"], r.json()["generation"]) == (
        "attached",
        "file",
        before + 1,
    )
    status = client.get("/hicache/storage-backend", headers=AUTH).json()
    assert status["hicache_storage_backend"] == "file"
    info = client.get("/server_info").json()
    assert info["config"]["memory"]["hicache_storage_backend"] == "file"
    assert info["overrides"][-1]["source"] == "hicache.attach"
    assert {
        row["values"]["hicache_storage_backend"] for row in info["ranks"] if row["rank"] or info["dp_size"] == 1
    } == {"file"}
    r = client.delete("/hicache/storage-backend", headers=AUTH)
    assert (r.status_code, r.json()["status"], r.json()["generation"]) == (200, "detached", before + 2)
    assert client.get("/hicache/storage-backend", headers=AUTH).json()["hicache_storage_backend"] is None
    again = client.delete("/hicache/storage-backend", headers=AUTH).json()
    assert (again["status"], again["generation"]) == ("not_attached", before + 2)


@pytest.mark.parametrize(
    ("body", "line"),
    [
        ({}, "$.memory.hicache_storage_backend: required -- name the backend to attach (file or memory)"),
        (
            {"hicache_storage_backend": "file", "hicache_storage_backend_extra_config_json": "{bad"},
            "$.memory.hicache_storage_backend_extra_config: expected a JSON object (Expecting property "
            "name enclosed in double quotes at char 1), got '{bad'"
            ' -- pass an object like {"dir": "/path"}',
        ),
        (
            {"hicache_storage_backnd": "file"},
            "$.memory.hicache_storage_backnd: unknown field 'hicache_storage_backnd' -- did you mean 'hicache_storage_backend'?",
        ),
    ],
)
def test_bad_attach_bodies_change_nothing(client: TestClient, body: dict[str, Any], line: str) -> None:
    """A bad attach body is a 422 naming the field; the generation stays."""
    before = generation(client)
    r = client.put("/hicache/storage-backend", json=body, headers=AUTH)
    assert r.status_code == 422, r.text
    assert line in r.json()["errors"]
    assert generation(client) == before


def test_unknown_replica_is_404(client: TestClient) -> None:
    """POST /replicas/<index>/restart|resync with an index the server does not have is a 404 saying why."""
    for action in ("restart", "resync"):
        r = client.post(f"/replicas/7/{action}", headers=AUTH)
        assert r.status_code == 404
        assert r.json()["detail"].startswith("there is no replica 7")
