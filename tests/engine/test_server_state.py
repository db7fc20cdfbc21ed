"""What a server reports about itself, the same for one engine and a two-replica group.

`/metrics` exports every single-engine series in both modes (per-engine gauges labelled
`replica` in a group), `config_overrides_total` is a real counter (it counts refusals
and never falls, however short the overrides log), and a stopping server says so.
Replica reports arrive every heartbeat interval, so checks on them poll with generous
deadlines.
"""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tests.support import wait_until

pytestmark = pytest.mark.server_args_shared
ADMIN = {"Authorization": "Bearer admin-key"}
LOG_LIMIT = 3  # the overrides log forgets quickly: the counter must not
FLAGS = {
    "max_total_tokens": 1024,
    "page_size": 4,
    "admin_api_key": "admin-key",
    "overrides_log_limit": LOG_LIMIT,
    "replica_heartbeat_interval_s": 0.1,
}
LOAD_SERIES = ("sgconf:num_running_reqs", "sgconf:num_queue_reqs", "sgconf:token_usage", "sgconf:cache_hit_rate")


def samples(http: TestClient) -> list[tuple[str, dict[str, str], float]]:
    r = http.get("/metrics")
    assert r.status_code == 200, r.text
    return [(s.name, s.labels, s.value) for fam in text_string_to_metric_families(r.text) for s in fam.samples]


def overrides(http: TestClient) -> dict[tuple[str, str], float]:
    return {
        (labels["source"], labels["result"]): value
        for name, labels, value in samples(http)
        if name == "sgconf:config_overrides_total"
    }


def test_every_engine_series_is_exported_labelled_by_replica_in_a_group(http: TestClient) -> None:
    """Each load gauge has one series per engine: unlabelled for one engine, replica="0" and "1" in a group."""
    group = http.app.state.backend.dp_size > 1  # type: ignore[attr-defined]
    http.post("/generate", json={"text": "count me", "max_new_tokens": 4, "ignore_eos": True})
    expected = [{"replica": "0"}, {"replica": "1"}] if group else [{}]

    def settled() -> dict[str, list[tuple[dict[str, str], float]]] | None:
        got: dict[str, list[tuple[dict[str, str], float]]] = {}
        for name, labels, value in samples(http):
            if name in LOAD_SERIES:
                got.setdefault(name, []).append((labels, value))
        complete = all(
            sorted(labels.items() for labels, _ in got.get(n, [])) == sorted(e.items() for e in expected)
            for n in LOAD_SERIES
        )
        idle = all(v == 0 for n in LOAD_SERIES[:2] for _, v in got.get(n, []))
        return got if complete and idle else None

    got = wait_until("every replica's report after the request", settled)
    for _, value in got["sgconf:token_usage"] + got["sgconf:cache_hit_rate"]:
        assert 0.0 <= value <= 1.0
    names = {name for name, _, _ in samples(http)}
    for name in (
        "sgconf:num_requests_total",
        "sgconf:prompt_tokens_total",
        "sgconf:generation_tokens_total",
        "sgconf:e2e_request_latency_seconds_count",
        "sgconf:config_generation",
    ):
        assert name in names


def test_config_overrides_total_counts_refusals_and_never_falls(http: TestClient) -> None:
    """Applied and refused changes each count once; more overrides than the log keeps still only add up."""
    before = overrides(http)
    source = "http.config_overrides"
    seen = []
    for i in range(LOG_LIMIT + 3):
        r = http.post("/config/overrides", json={"schedule_conservativeness": 0.5 + i / 10}, headers=ADMIN)
        assert r.status_code == 200, r.text
        seen.append(overrides(http).get((source, "applied"), 0.0))
    assert seen == [before.get((source, "applied"), 0.0) + n for n in range(1, LOG_LIMIT + 4)]
    r = http.post("/config/overrides", json={"schedule_conservativeness": -1}, headers=ADMIN)
    assert r.status_code == 422
    r = http.post("/config/overrides", json={"page_size": 8}, headers=ADMIN)  # not hot
    assert r.status_code == 422
    r = http.put("/hicache/storage-backend", json={"hicache_storage_backend": "memory"}, headers=ADMIN)  # cache off
    assert r.status_code == 422
    assert r.json()["errors"][-1].endswith(
        "$.memory.enable_hierarchical_cache: --hicache-storage-backend requires --enable-hierarchical-cache"
        " -- enable the hierarchical cache at launch (from override hicache.attach)"
    )
    assert http.delete("/hicache/storage-backend", headers=ADMIN).json()["status"] == "not_attached"
    after = overrides(http)
    assert after[(source, "refused")] == before.get((source, "refused"), 0.0) + 2
    assert after[("hicache.attach", "refused")] == before.get(("hicache.attach", "refused"), 0.0) + 1
    assert after[(source, "applied")] == seen[-1]  # refusals changed nothing else
    assert http.post("/config/overrides", json={"page_size": 8}).status_code == 401  # not a change: not counted
    assert overrides(http) == after


def test_config_overrides_total_has_its_series_at_zero_from_the_start(http: TestClient) -> None:
    """A fresh app exports every admin route's (source, result) at 0 before any change, in both modes."""
    from engine.http.app import create_app

    fresh = TestClient(create_app(http.app.state.backend))  # type: ignore[attr-defined]
    expected = {
        (source, result): 0.0
        for source in ("http.config_overrides", "hicache.attach", "hicache.detach")
        for result in ("applied", "reverted", "refused")
    }
    assert overrides(fresh) == expected


def test_a_stopping_server_says_so_and_refuses_new_requests(http: TestClient) -> None:
    """Once stopping: /health is 503 "stopping", new requests get 503 with Connection: close, /metrics answers."""
    from engine.http.app import create_app

    backend = http.app.state.backend  # type: ignore[attr-defined]
    client = TestClient(create_app(backend))  # a fresh lifecycle: the shared app keeps serving
    assert client.get("/health").json()["status"] == "ok"
    lifecycle = client.app.state.lifecycle  # type: ignore[attr-defined]
    lifecycle.stop()
    r = client.get("/health")
    assert r.status_code == 503
    assert (r.json()["status"], r.json()["inflight"]) == ("stopping", 0)
    assert r.json()["detail"] == "the server is stopping -- retry on another server; 0 request(s) still in flight"
    r = client.post("/generate", json={"text": "late", "max_new_tokens": 1})
    assert (r.status_code, r.json(), r.headers["connection"]) == (
        503,
        {"detail": "the server is stopping -- retry on another server"},
        "close",
    )
    assert client.post("/v1/completions", json={"model": "tiny", "prompt": "x"}).status_code == 503
    assert client.get("/metrics").status_code == 200


def test_a_stream_counts_as_in_flight_until_its_last_event(http: TestClient) -> None:
    """The lifecycle counts a streamed answer until it ends, so a stopping server waits for the whole stream."""
    lifecycle = http.app.state.lifecycle  # type: ignore[attr-defined]
    assert lifecycle.inflight == 0
    with http.stream(
        "POST", "/generate", json={"text": "s", "max_new_tokens": 6, "ignore_eos": True, "stream": True}
    ) as r:
        lines = r.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        assert "delta" in json.loads(first[len("data: ") :])
        assert lifecycle.inflight == 1
        rest = [line for line in lines if line.startswith("data: ")]
    assert rest[-1] == "data: [DONE]"
    assert lifecycle.inflight == 0


def test_a_batch_of_latencies_lands_in_the_buckets_one_observation_at_a_time_would() -> None:
    """The latency histograms take a batch at once and export what observing each amount alone exports."""
    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    from engine.http.metrics import LATENCY_BUCKETS, _BatchHistogram

    amounts = [0.0, 0.005, 0.0051, 0.3, 0.3, 1.0, 59.9, 60.0, 61.0, 1e9, 0.001]
    one, batch = CollectorRegistry(), CollectorRegistry()
    each = Histogram("lat", "latency", buckets=LATENCY_BUCKETS, registry=one)
    for amount in amounts:
        each.observe(amount)
    _BatchHistogram("lat", "latency", buckets=LATENCY_BUCKETS, registry=batch).observe_all(amounts)

    def series(registry: CollectorRegistry) -> list[tuple[str, dict[str, str], float]]:
        text = generate_latest(registry).decode()
        return [
            (s.name, s.labels, s.value)
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
            if not s.name.endswith("_created")
        ]

    assert series(batch) == series(one)
    assert ("lat_bucket", {"le": "0.005"}, 3.0) in series(batch)
