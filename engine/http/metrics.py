"""`/metrics`: Prometheus text through `prometheus_client`, under the `sgconf:` prefix.

Names follow the usual serving runtimes' (`num_running_reqs`, `num_queue_reqs`,
`prompt_tokens_total`, `generation_tokens_total`, `time_to_first_token_seconds`,
`e2e_request_latency_seconds`), so a dashboard ports by renaming the prefix. Counters and
histograms are fed by the routes as each request finishes; gauges are read from the
backend and the config context when scraped, so they are never stale. Each app owns its
registry, so two apps in one process never share counts.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from engine.http.backend import ServingBackend
from runtime.context import get_context
from runtime.errors import NotPublishedError

PREFIX = "sgconf:"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _Live:
    """Gauges read at scrape time: queue sizes, config generation and overrides by source and result."""

    def __init__(self, backend: ServingBackend) -> None:
        self.backend = backend

    def collect(self) -> Iterator[Metric]:
        _, health = self.backend.health()
        running = GaugeMetricFamily(PREFIX + "num_running_reqs", "requests running now")
        running.add_metric([], float(health.get("running", 0)))
        queued = GaugeMetricFamily(PREFIX + "num_queue_reqs", "requests waiting to be admitted")
        queued.add_metric([], float(health.get("queued", 0)))
        yield running
        yield queued
        usage = self.backend.usage()
        for name, doc in (("token_usage", "share of KV pool slots in use"),
                          ("cache_hit_rate", "share of looked-up prompt tokens served from the prefix cache")):
            if name in usage:
                gauge = GaugeMetricFamily(PREFIX + name, doc)
                gauge.add_metric([], float(usage[name]))
                yield gauge
        try:
            ctx = get_context()
        except NotPublishedError:  # the engine stopped and took its config
            return
        gen = GaugeMetricFamily(PREFIX + "config_generation", "the config generation in force")
        gen.add_metric([], float(ctx.generation))
        yield gen
        tally: Tally[tuple[str, str]] = Tally()
        for rec in ctx.overrides_log():
            source = str(rec.source)
            if source.startswith("revert:"):
                tally[(source.removeprefix("revert:"), "reverted")] += 1
            else:
                tally[(source, "applied")] += 1
        overrides = CounterMetricFamily(PREFIX + "config_overrides", "post-publish overrides by source and result",
                                        labels=["source", "result"])
        for (source, result), count in sorted(tally.items()):
            overrides.add_metric([source, result], float(count))
        yield overrides


class Metrics:
    """One app's metrics: `observe(meta)` for each finished request, `render()` for a scrape."""

    def __init__(self, backend: ServingBackend) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(PREFIX + "num_requests", "finished requests", registry=r)
        self.prompt_tokens = Counter(PREFIX + "prompt_tokens", "prompt tokens of finished requests", registry=r)
        self.generation_tokens = Counter(PREFIX + "generation_tokens", "tokens generated", registry=r)
        self.cached_tokens = Counter(PREFIX + "cached_tokens", "prompt tokens served from the prefix cache",
                                     registry=r)
        self.ttft = Histogram(PREFIX + "time_to_first_token_seconds", "time to the first token",
                              buckets=LATENCY_BUCKETS, registry=r)
        self.e2e = Histogram(PREFIX + "e2e_request_latency_seconds", "request latency from admission to the end",
                             buckets=LATENCY_BUCKETS, registry=r)
        r.register(_Live(backend))  # type: ignore[arg-type]

    def observe(self, meta: dict[str, Any]) -> None:
        """Count one finished request from its `/generate` meta."""
        self.requests.inc()
        self.prompt_tokens.inc(int(meta.get("prompt_tokens", 0)))
        self.generation_tokens.inc(int(meta.get("completion_tokens", 0)))
        self.cached_tokens.inc(int(meta.get("cached_tokens", 0)))
        if meta.get("time_to_first_token_s") is not None:
            self.ttft.observe(float(meta["time_to_first_token_s"]))
        if meta.get("latency_s") is not None:
            self.e2e.observe(float(meta["latency_s"]))

    def render(self) -> bytes:
        return generate_latest(self.registry)


__all__ = ["CONTENT_TYPE", "PREFIX", "Metrics"]
