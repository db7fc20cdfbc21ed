"""The HTTP control plane through httpx: generate, server_info, HiCache attach/detach, overrides, auth."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from engine.engine import Engine
from engine.http.app import create_app
from engine.http.engine_backend import EngineBackend
from runtime.serving import get_memory
from tests.engine.serving import ADMIN_AUTH as AUTH

PROMPT = "The storage tier keeps pages of this prompt for the next engine."


def attach_body(directory: Path, **extra: str) -> dict:
    return {
        "hicache_storage_backend": "file",
        "hicache_storage_backend_extra_config_json": f'{{"dir": "{directory}"}}',
        **extra,
    }


def test_attach_store_and_reuse_in_a_fresh_engine(serve, tmp_path: Path) -> None:
    """Pages written after attach are prefetched by a fresh engine on the same directory; output is identical."""
    engine, client = serve()
    first = client.post("/generate", json={"text": PROMPT, "max_new_tokens": 12}).json()
    r = client.put("/hicache/storage-backend", json=attach_body(tmp_path), headers=AUTH)
    assert r.status_code == 200, r.text
    assert r.json()["hicache_storage_backend"] == "file"
    assert get_memory().hicache_storage_backend == "file"
    assert engine.context.record.hicache_storage_backend is None  # the raw record keeps the startup value
    info = client.get("/server_info").json()
    assert info["config"]["memory"]["hicache_storage_backend"] == "file"
    assert info["generation"] == 1
    assert info["overrides"][0]["source"] == "hicache.attach"
    assert info["provenance"]["hicache_storage_backend"][-1]["layer"] == "override"
    assert info["provenance"]["hicache_storage_backend"][-1]["detail"] == "hicache.attach"
    assert info["startup_values"]["hicache_storage_backend"] is None
    again = client.post("/generate", json={"text": PROMPT, "max_new_tokens": 12}).json()
    assert again["output_ids"] == first["output_ids"]
    engine.shutdown()  # closing the controller flushes the pending writes

    engine2, client2 = serve()
    r = client2.put(
        "/hicache/storage-backend",
        json=attach_body(tmp_path, hicache_storage_prefetch_policy="wait_complete"),
        headers=AUTH,
    )
    assert r.status_code == 200, r.text
    reused = client2.post("/generate", json={"text": PROMPT, "max_new_tokens": 12}).json()
    assert reused["output_ids"] == first["output_ids"]
    assert reused["meta_info"]["prefetched_tokens"] > 0
    assert engine2.stats()["hicache"]["storage_hits"] > 0
    r = client2.delete("/hicache/storage-backend", headers=AUTH)
    assert r.status_code == 200 and r.json()["status"] == "detached"
    assert client2.get("/hicache/storage-backend", headers=AUTH).json()["hicache_storage_backend"] is None
    assert get_memory().hicache_storage_backend is None
    assert [o["source"] for o in client2.get("/server_info").json()["overrides"]] == [
        "hicache.attach",
        "hicache.detach",
    ]
    again = client2.delete("/hicache/storage-backend", headers=AUTH).json()
    assert again["status"] == "not_attached" and again["generation"] == 2


ADMIN_ROUTES = [
    ("GET", "/hicache/storage-backend"),
    ("PUT", "/hicache/storage-backend"),
    ("DELETE", "/hicache/storage-backend"),
    ("POST", "/config/overrides"),
]


@pytest.mark.parametrize(("method", "path"), ADMIN_ROUTES)
def test_auth_matrix(serve, method: str, path: str) -> None:
    """No bearer is 401, a wrong one 403, and nothing changes either way."""
    engine, client = serve()
    missing = client.request(method, path)
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == "Bearer"
    assert missing.json() == {"detail": "admin routes needs 'Authorization: Bearer <key>'"}
    wrong = client.request(method, path, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 403
    assert wrong.json() == {
        "detail": "the bearer key is not valid for admin routes -- use the key given with --admin-api-key"
    }
    assert engine.context.generation == 0


def test_admin_routes_refused_without_admin_key() -> None:
    """A server started without admin_api_key refuses admin routes, even with a bearer."""
    engine = Engine.from_args(["--max-total-tokens", "256", "--enable-hierarchical-cache"])
    try:
        r = TestClient(create_app(EngineBackend(engine))).delete("/hicache/storage-backend", headers=AUTH)
        assert r.status_code == 403
        assert r.json()["detail"] == (
            "admin routes are disabled: this server has no admin key -- restart it with "
            "--admin-api-key-file FILE or env SGCONF_ADMIN_API_KEY"
        )
    finally:
        engine.shutdown()


def test_hot_override_applies_at_once_while_a_request_runs(serve) -> None:
    """A hot override under a running request is applied at the next step boundary: 200, never 409."""
    engine, client = serve()
    engine.pause()
    req = engine.submit(PROMPT, max_new_tokens=4)
    engine.step()  # admitted and prefilled: it runs now
    assert engine.busy_counts() == (0, 1)
    r = client.post("/config/overrides", json={"schedule_conservativeness": 0.5}, headers=AUTH)
    assert r.status_code == 200, r.text
    assert r.json()["generation"] == 1 and r.json()["fields"] == {"schedule_conservativeness": {"old": 1.0, "new": 0.5}}
    engine.resume()
    assert len(engine.wait(req, timeout=60).token_ids) == 4


def test_drain_that_cannot_finish_answers_409_and_changes_nothing(serve, tmp_path: Path) -> None:
    """Attach and detach drain; a request that cannot finish (the loop is paused) makes them 409 with Retry-After."""
    engine, client = serve("--drain-timeout-s", "0.2")
    engine.pause()
    req = engine.submit(PROMPT, max_new_tokens=4)
    engine.step()
    queued = engine.submit(PROMPT, max_new_tokens=2)  # waits in the queue: a drain does not wait for it
    for method, path, body in [
        ("PUT", "/hicache/storage-backend", attach_body(tmp_path)),
        ("DELETE", "/hicache/storage-backend", None),
    ]:
        r = client.request(method, path, json=body, headers=AUTH)
        assert r.status_code == 409, r.text
        assert r.headers["retry-after"] == "1"
        assert (r.json()["queued"], r.json()["running"]) == (1, 1)
        assert (
            "the drain did not come within 0.2 s (1 queued, 1 running requests); nothing changed" in r.json()["detail"]
        )
    assert engine.context.generation == 0 and get_memory().hicache_storage_backend is None
    assert engine.scheduler.admission_paused == 0  # the withdrawn drains resumed admission
    engine.resume()
    assert len(engine.wait(req, timeout=60).token_ids) == 4
    assert len(engine.wait(queued, timeout=60).token_ids) == 2
    assert client.put("/hicache/storage-backend", json=attach_body(tmp_path), headers=AUTH).status_code == 200


def test_bad_attach_bodies_change_nothing(serve, tmp_path: Path) -> None:
    """422 lists each bad field with its path, 400 covers bad JSON and unusable directories."""
    engine, client = serve()
    r = client.put(
        "/hicache/storage-backend",
        json={"hicache_storage_backend": "nfs", "hicache_write_policy": "sometimes"},
        headers=AUTH,
    )
    assert r.status_code == 422
    assert r.json()["errors"] == [
        "$.memory.hicache_storage_backend: must name a registered HiCache storage backend (file, memory), got 'nfs' "
        "(from override hicache.attach)",
        "$.memory.hicache_write_policy: expected one of 'write_through', 'write_back', 'write_through_selective',"
        " got 'sometimes' (from override hicache.attach)",
    ]
    r = client.put(
        "/hicache/storage-backend", json={"hicache_storage_backend": "file", "hicache_write_polcy": "x"}, headers=AUTH
    )
    assert r.status_code == 422
    assert r.json()["errors"] == [
        "$.memory.hicache_write_polcy: unknown field 'hicache_write_polcy' -- did you mean 'hicache_write_policy'?"
    ]
    r = client.put("/hicache/storage-backend", content=b"{not json", headers=AUTH)
    assert r.status_code == 400
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    r = client.put("/hicache/storage-backend", json=attach_body(blocker / "sub"), headers=AUTH)
    assert r.status_code == 400
    assert r.json()["errors"][0].startswith("$.memory.hicache_storage_backend_extra_config.dir: ")
    assert engine.context.generation == 0
    assert get_memory().hicache_storage_backend is None
    assert engine.hicache.controller.storage_backend is None


def test_concurrent_attach_detach_is_serialised(serve, tmp_path: Path) -> None:
    """Racing attach/detach calls all succeed one at a time; the final state matches the last one."""
    engine, client = serve()

    def call(i: int) -> int:
        if i % 2:
            return client.delete("/hicache/storage-backend", headers=AUTH).status_code
        return client.put("/hicache/storage-backend", json=attach_body(tmp_path / str(i)), headers=AUTH).status_code

    with ThreadPoolExecutor(6) as pool:
        statuses = list(pool.map(call, range(12)))
    assert statuses == [200] * 12
    log = engine.context.overrides_log()
    last = log[-1].source
    expected = "file" if last == "hicache.attach" else None
    assert get_memory().hicache_storage_backend == expected
    assert (engine.hicache.controller.storage_backend is not None) == (expected is not None)
    assert [rec.generation for rec in log] == list(range(1, len(log) + 1))


def test_torn_storage_files_are_skipped(serve, tmp_path: Path) -> None:
    """A truncated page and a stray temp file (a crash mid-write) are skipped on the next attach."""
    engine, client = serve()
    client.put("/hicache/storage-backend", json=attach_body(tmp_path), headers=AUTH)
    first = client.post("/generate", json={"text": PROMPT, "max_new_tokens": 8}).json()
    client.post("/generate", json={"text": PROMPT, "max_new_tokens": 8})  # backs the finished prefix up
    engine.shutdown()
    pages = sorted(tmp_path.rglob("*.kvpage"))
    assert len(pages) >= 10
    torn = pages[0]
    torn.write_bytes(torn.read_bytes()[:37])
    (torn.parent / f".{torn.stem}.crash.tmp").write_bytes(b"partial")

    engine2, client2 = serve()
    body = attach_body(tmp_path, hicache_storage_prefetch_policy="wait_complete")
    assert client2.put("/hicache/storage-backend", json=body, headers=AUTH).status_code == 200
    again = client2.post("/generate", json={"text": PROMPT, "max_new_tokens": 8})
    assert again.status_code == 200
    assert again.json()["output_ids"] == first["output_ids"]
    assert engine2.stats()["hicache"]["corrupt_skipped"] >= 1


def test_config_overrides_hot_fields_only(serve) -> None:
    """Hot fields change with provenance; a non-hot field is refused and nothing changes."""
    engine, client = serve()
    r = client.post("/config/overrides", json={"schedule_conservativeness": 0.5}, headers=AUTH)
    assert r.status_code == 200
    body = r.json()
    assert (body["status"], body["generation"], body["consistent"]) == ("applied", 1, True)
    assert body["fields"] == {"schedule_conservativeness": {"old": 1.0, "new": 0.5}}
    assert [(row["rank"], row["generation"]) for row in body["ranks"]] == [(0, 1)]
    before = engine.context.fingerprint()
    r = client.post("/config/overrides", json={"page_size": 8, "schedule_conservativeness": 0.1}, headers=AUTH)
    assert r.status_code == 422
    assert len(r.json()["errors"]) == 1 and r.json()["errors"][0].startswith("$.schedule.page_size: ")
    assert engine.context.generation == 1 and engine.context.fingerprint() == before


def test_generate_validates_its_body(serve) -> None:
    """Bad generate bodies get 422 lines, over-long requests too; token ids work as input."""
    engine, client = serve()
    r = client.post("/generate", json={"max_new_tokens": 0, "temperature": -1})
    assert r.status_code == 422
    assert r.json()["errors"] == [
        "$.text: give exactly one of 'text' (or 'prompt') and 'input_ids'",
        "$.max_new_tokens: must be in [1, 1048576] (got 0)",
        "$.temperature: must be in [0, 100] (got -1)",
    ]
    r = client.post("/generate", json={"input_ids": [1] * 2040, "max_new_tokens": 20})
    assert r.status_code == 422 and r.json()["errors"][0].startswith("$.max_new_tokens: a prompt of 2040 tokens")
    ok = client.post(
        "/generate", json={"input_ids": [72, 105], "sampling_params": {"max_new_tokens": 3, "ignore_eos": True}}
    )
    assert ok.status_code == 200 and len(ok.json()["output_ids"]) == 3
    assert client.get("/health").json() == {"status": "ok", "queued": 0, "running": 0}


def test_prompt_that_can_never_fit_is_a_client_error(serve) -> None:
    """A prompt beyond the KV pool gets 400 naming the limit, beyond the context 422 at the field; a stopped engine 503."""
    engine, client = serve("--max-total-tokens", "64")
    r = client.post("/generate", json={"input_ids": [1] * 100, "max_new_tokens": 4})
    assert r.status_code == 400
    assert r.json() == {
        "detail": "prompt of 100 tokens needs 100 KV slots, more than 'max_total_tokens' 64 holds"
        " -- shorten the prompt or raise --max-total-tokens"
    }
    r = client.post("/generate", json={"input_ids": [1] * 2040, "sampling_params": {"max_tokens": 20}})
    assert r.status_code == 422  # a parameter the client can lower: at the spelling and place it was sent
    assert r.json() == {
        "detail": "invalid request parameters: max_tokens",
        "errors": [
            "$.sampling_params.max_tokens: a prompt of 2040 tokens plus 20 new tokens exceeds the context length"
            " 2048 ('context_length') -- ask for at most 8 new tokens, or shorten the prompt"
        ],
    }
    assert client.post("/generate", json={"input_ids": [1] * 60, "max_new_tokens": 1}).status_code == 200
    engine.shutdown(unpublish=False)  # the config stays published, as in a server draining its engine
    r = client.post("/generate", json={"input_ids": [1] * 8, "max_new_tokens": 1})
    assert r.status_code == 503
    assert r.json() == {"detail": "the engine is shut down -- start a new one"}
    from runtime.context import reset

    reset()  # the fixture's shutdown finds the engine stopped and leaves the context to us
    r = client.post("/generate", json={"input_ids": [1] * 8, "max_new_tokens": 1})
    assert r.status_code == 503
    assert r.json() == {
        "detail": "the server's config is no longer published (its engine stopped) -- start a new server"
    }


def test_attach_file_without_dir_uses_the_default_and_shows_it(
    serve, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PUT without a dir attaches under SGCONF_HICACHE_FILE_DIR; the status and /server_info name the directory."""
    monkeypatch.setenv("SGCONF_HICACHE_FILE_DIR", str(tmp_path / "kv"))
    engine, client = serve()
    r = client.put("/hicache/storage-backend", json={"hicache_storage_backend": "file"}, headers=AUTH)
    assert r.status_code == 200, r.text
    assert r.json()["storage_dir"] == str(tmp_path / "kv")
    assert r.json()["hicache_storage_backend_extra_config"] == {"dir": str(tmp_path / "kv")}
    info = client.get("/server_info").json()
    assert info["config"]["memory"]["hicache_storage_backend_extra_config"] == {"dir": str(tmp_path / "kv")}
    assert info["stats"]["hicache"]["storage_dir"] == str(tmp_path / "kv")


def test_server_info_lists_how_each_field_applies(serve) -> None:
    """`apply_modes` says step, drain or restart for every declared field."""
    _, client = serve()
    modes = client.get("/server_info").json()["apply_modes"]
    assert (modes["schedule_policy"], modes["hicache_storage_backend"], modes["page_size"]) == (
        "step",
        "drain",
        "restart",
    )
    assert set(modes.values()) == {"step", "drain", "restart"}


ODD_BODIES = ["null", "[]", '"text"', "1", "true", "{", '{"a": 1', "\x00", '{"page_size": null}', '{"": 1}']


@pytest.mark.parametrize(("method", "path"), [r for r in ADMIN_ROUTES if r[0] in ("PUT", "POST")])
def test_every_admin_route_answers_4xx_for_any_body(serve, method: str, path: str) -> None:
    """No body an operator can send ends in a 500; each answer names what is wrong, and nothing changes."""
    engine, client = serve()
    for body in ODD_BODIES:
        r = client.request(method, path, content=body.encode(), headers={**AUTH, "Content-Type": "application/json"})
        assert 400 <= r.status_code < 500, (body, r.status_code, r.text)
        assert r.json(), body
    assert engine.context.generation == 0


def test_server_info_says_what_resolution_decided_and_the_budget_the_pools_were_sized_for(serve) -> None:
    """Every resolved value carries its step and reason, and the pools name their budget and its source."""
    _, client = serve()
    info = client.get("/server_info").json()
    assert info["resolution"]["kv_cache_memory_bytes"] == {
        "step": "schedule_defaults",
        "reason": "default for cpu: no device memory is measured there",
        "value": 64 << 20,
    }
    assert info["resolution"]["max_running_requests"]["reason"] == "default for cpu"
    assert "page_size" not in info["resolution"]  # given on the command line: not a decision
    plan = info["pools"]["plan"]
    assert (plan["budget_bytes"], plan["budget_source"]) == (64 << 20, "kv_cache_memory_bytes")
    assert info["pools"]["total_bytes"] == plan["total_bytes"]
