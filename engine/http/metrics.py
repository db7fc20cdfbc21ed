"""`/metrics`: Prometheus text through `prometheus_client`, under the `sgconf:` prefix.

Names follow the usual serving runtimes' (`num_running_reqs`, `num_queue_reqs`,
`prompt_tokens_total`, `generation_tokens_total`, `time_to_first_token_seconds`,
`e2e_request_latency_seconds`), so a dashboard ports by renaming the prefix. Counters and
histograms are fed by the routes as each request finishes; gauges are read from the
backend and the config context when scraped, so they are never stale. The queue and pool
gauges have one series per engine: unlabelled for one engine, labelled `replica` in a
group (each replica's last report), and `node` too when the group spans nodes, so every
mode exports the same names.
`config_overrides_total{source,result}` counts every config change since start
(`applied`, `reverted`, `refused`); it only ever rises, and the series of the admin
routes' sources (`KNOWN_CHANGES`) are there at 0 from the start, so `rate()` and
`absent()` see them before the first change. Each app owns its registry, so two
apps in one process never share counts; the apps of one server share its override tally.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from engine.http.backend import ServingBackend
from engine.storage_change import ATTACH_SOURCE, DETACH_SOURCE
from runtime.context import get_context
from runtime.errors import NotPublishedError
from runtime.overrides import REVERT_PREFIX, inner_source

PREFIX = "sgconf:"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OVERRIDE_SOURCE = "http.config_overrides"  # the source of `POST /config/overrides`
RESULTS = ("applied", "reverted", "refused")
# every (source, result) of a change an admin route makes: counted from 0 at start
KNOWN_CHANGES = tuple(
    (source, result) for source in (OVERRIDE_SOURCE, ATTACH_SOURCE, DETACH_SOURCE) for result in RESULTS
)


class OverrideTally:
    """Config changes by source and result since the server started: a monotonic count, never rebuilt.

    `applied` and `reverted` come from the config context (every commit of any source,
    heard as a subscriber); `refused` from the routes that take a change (`refused()`),
    whatever refused it. One tally is shared by every app of a server, so a change
    refused on the admin listener shows in the public `/metrics`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = dict.fromkeys(KNOWN_CHANGES, 0)
        self._subscription: Any = None
        try:
            self._subscription = get_context().subscribe(self._committed)
        except NotPublishedError:
            pass  # nothing can commit before publish: only refusals are counted then

    def _committed(self, event: Any) -> None:
        source = str(event.record.source)
        if source.startswith(REVERT_PREFIX):
            self._bump(inner_source(source), "reverted")
        else:
            self._bump(source, "applied")

    def refused(self, source: str) -> None:
        self._bump(source, "refused")

    def _bump(self, source: str, result: str) -> None:
        with self._lock:
            self._counts[(source, result)] = self._counts.get((source, result), 0) + 1

    def counts(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)


# (name, help, EngineLoad attribute): one series per engine, labelled `replica` in a group
_LOAD_GAUGES = (
    ("num_running_reqs", "requests running now", "running"),
    ("num_queue_reqs", "requests waiting to be admitted", "queued"),
    ("token_usage", "share of KV pool slots in use", "token_usage"),
    ("cache_hit_rate", "share of looked-up prompt tokens served from the prefix cache", "cache_hit_rate"),
)


class _Live:
    """Series read at scrape time: each engine's load, the config generation, the override tally."""

    def __init__(self, backend: ServingBackend, tally: OverrideTally) -> None:
        self.backend = backend
        self.tally = tally

    def collect(self) -> Iterator[Metric]:
        loads = self.backend.loads()
        labels = ["replica"] if any(load.replica is not None for load in loads) else []
        if any(load.node is not None for load in loads):
            labels.append("node")
        for name, doc, attr in _LOAD_GAUGES:
            gauge = GaugeMetricFamily(PREFIX + name, doc, labels=labels)
            for load in loads:
                value = getattr(load, attr)
                if value is not None:
                    gauge.add_metric([str(load.replica), str(load.node)][: len(labels)], float(value))
            if gauge.samples or attr in ("running", "queued"):
                yield gauge
        overrides = CounterMetricFamily(
            PREFIX + "config_overrides", "config changes by source and result", labels=["source", "result"]
        )
        for (source, result), count in sorted(self.tally.counts().items()):
            overrides.add_metric([source, result], float(count))
        yield overrides
        try:
            ctx = get_context()
        except NotPublishedError:  # the engine stopped and took its config
            return
        gen = GaugeMetricFamily(PREFIX + "config_generation", "the config generation in force")
        gen.add_metric([], float(ctx.generation))
        yield gen


class _BatchHistogram(Histogram):
    """A `Histogram` that takes a batch's observations at once: each bucket and the sum move once per batch.

    `observe` per item takes a lock per bucket and sum for each item, on the event loop;
    the counts it would leave are the same (an amount lands in the first bucket whose
    bound holds it, NaN in none).
    """

    def observe_all(self, amounts: Sequence[float]) -> None:
        self._raise_if_not_observable()
        bounds = self._upper_bounds
        counts = [0] * len(bounds)
        for amount in amounts:
            if amount <= bounds[-1]:
                counts[bisect.bisect_left(bounds, amount)] += 1
        if amounts:
            self._sum.inc(sum(amounts))
        for bucket, count in zip(self._buckets, counts, strict=True):
            if count:
                bucket.inc(count)


class Metrics:
    """One app's metrics: `observe_many(metas)` for finished requests, `render()` for a scrape."""

    def __init__(self, backend: ServingBackend, tally: OverrideTally | None = None) -> None:
        self.tally = OverrideTally() if tally is None else tally
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(PREFIX + "num_requests", "finished requests", registry=r)
        self.prompt_tokens = Counter(PREFIX + "prompt_tokens", "prompt tokens of finished requests", registry=r)
        self.generation_tokens = Counter(PREFIX + "generation_tokens", "tokens generated", registry=r)
        self.cached_tokens = Counter(PREFIX + "cached_tokens", "prompt tokens served from the prefix cache", registry=r)
        self.ttft = _BatchHistogram(
            PREFIX + "time_to_first_token_seconds", "time to the first token", buckets=LATENCY_BUCKETS, registry=r
        )
        self.e2e = _BatchHistogram(
            PREFIX + "e2e_request_latency_seconds",
            "request latency from admission to the end",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        r.register(_Live(backend, self.tally))  # type: ignore[arg-type]

    def observe_many(self, metas: Sequence[dict[str, Any]]) -> None:
        """Count finished requests from their `/generate` metas; a batch adds to each counter once, not once an item."""
        if not metas:
            return
        self.requests.inc(len(metas))
        self.prompt_tokens.inc(sum(int(m.get("prompt_tokens", 0)) for m in metas))
        self.generation_tokens.inc(sum(int(m.get("completion_tokens", 0)) for m in metas))
        self.cached_tokens.inc(sum(int(m.get("cached_tokens", 0)) for m in metas))
        self.ttft.observe_all([float(v) for m in metas if (v := m.get("time_to_first_token_s")) is not None])
        self.e2e.observe_all([float(v) for m in metas if (v := m.get("latency_s")) is not None])

    def render(self) -> bytes:
        return generate_latest(self.registry)


__all__ = ["CONTENT_TYPE", "PREFIX", "Metrics"]
