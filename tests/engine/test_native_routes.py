"""The native routes users of other runtimes expect: streamed and batched /generate, /metrics and the small ones."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

pytestmark = [pytest.mark.server_args_shared, pytest.mark.slow]
FLAGS = {"max_total_tokens": 1024, "page_size": 4}


def events(text: str) -> list[str]:
    return [line[len("data: ") :] for line in text.split("\n\n") if line.startswith("data: ")]


def scrape(http: TestClient) -> dict[str, float]:
    r = http.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {
        s.name + json.dumps(s.labels, sort_keys=True) if s.labels else s.name: s.value
        for fam in text_string_to_metric_families(r.text)
        for s in fam.samples
    }


def test_generate_stream_adds_up_to_the_whole_text(http: TestClient) -> None:
    """A streamed /generate sends deltas, then the full answer, then [DONE]; the deltas equal the whole text."""
    body = {"text": "stream", "max_new_tokens": 10, "ignore_eos": True}
    whole = http.post("/generate", json=body).json()
    r = http.post("/generate", json={**body, "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    data = events(r.text)
    assert data[-1] == "[DONE]"
    final = json.loads(data[-2])
    chunks = [json.loads(d) for d in data[:-2]]
    assert len(chunks) >= len(whole["output_ids"])  # a piece per token (stream_interval 1), from replicas too
    assert "".join(c["delta"] for c in chunks) == whole["text"] == final["text"]
    assert sum((c["output_ids"] for c in chunks), []) == whole["output_ids"]
    assert "config_generation" in final["meta_info"]


def test_generate_batch_of_texts_and_ids(http: TestClient) -> None:
    """A list of texts or of id lists gives a list of answers in order, each as if sent alone."""
    one = http.post("/generate", json={"text": "b", "max_new_tokens": 3}).json()
    many = http.post("/generate", json={"text": ["a", "b"], "max_new_tokens": 3})
    assert many.status_code == 200
    assert [m["text"] for m in many.json()][1] == one["text"]
    ids = http.post("/generate", json={"input_ids": [list(b"b"), list(b"a")], "max_new_tokens": 3}).json()
    assert ids[0]["output_ids"] == one["output_ids"]


def test_metrics_parse_and_counters_rise(http: TestClient) -> None:
    """prometheus_client parses /metrics; requests and tokens counters rise by what one request used."""
    before = scrape(http)
    http.post("/generate", json={"text": "count", "max_new_tokens": 4, "ignore_eos": True})
    after = scrape(http)
    assert after["sgconf:num_requests_total"] == before["sgconf:num_requests_total"] + 1
    assert after["sgconf:prompt_tokens_total"] == before["sgconf:prompt_tokens_total"] + len(b"count")
    assert after["sgconf:generation_tokens_total"] == before["sgconf:generation_tokens_total"] + 4
    assert after["sgconf:e2e_request_latency_seconds_count"] == before["sgconf:e2e_request_latency_seconds_count"] + 1
    assert after["sgconf:time_to_first_token_seconds_count"] >= before["sgconf:time_to_first_token_seconds_count"] + 1
    assert "sgconf:config_generation" in after
    if http.app.state.backend.dp_size == 1:  # type: ignore[attr-defined]  # a group's series: test_server_state
        assert after["sgconf:num_running_reqs"] == 0 and after["sgconf:num_queue_reqs"] == 0
        assert 0.0 <= after["sgconf:token_usage"] <= 1.0
        assert 0.0 <= after["sgconf:cache_hit_rate"] <= 1.0


def test_model_info_and_health_generate(http: TestClient) -> None:
    """/get_model_info names the model; /health_generate runs a one-token generation."""
    info = http.get("/get_model_info").json()
    assert info["model_path"] == "tiny" and info["is_generation"] is True
    r = http.get("/health_generate")
    assert r.status_code == 200 and len(r.json()["output_ids"]) == 1


def test_bad_stream_flag_and_streamed_batch_are_refused(http: TestClient) -> None:
    """stream must be a boolean, and a batch cannot be streamed: 422 naming the field."""
    r = http.post("/generate", json={"text": "x", "stream": "yes"})
    assert r.status_code == 422 and r.json()["errors"] == ["$.stream: expected a boolean (got 'yes')"]
    r = http.post("/generate", json={"text": ["x", "y"], "stream": True})
    assert r.status_code == 422
    assert r.json()["errors"] == ["$.text: a batch cannot be streamed -- send one prompt per request, or stream=false"]


def test_flush_cache_empties_the_prefix_cache(http: TestClient) -> None:
    """After a request leaves its prefix cached, /flush_cache frees it; a second flush frees nothing."""
    http.post("/generate", json={"text": "cache me please", "max_new_tokens": 2})
    first = http.post("/flush_cache")
    assert first.status_code == 200, first.text
    assert first.json()["status"] == "flushed" and first.json()["flushed_tokens"] > 0
    assert http.post("/flush_cache").json()["flushed_tokens"] == 0
