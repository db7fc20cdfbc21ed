"""Concurrency: lock-free readers never see half of an override while a writer commits thousands."""

from __future__ import annotations

import threading

from structlog.testing import capture_logs

from runtime import get_context, get_schedule, process

OVERRIDES = 2000
READERS = 3


def test_readers_never_see_half_an_override(sgconf_context):
    """Two fields in two bags always change together; readers check they match in every snapshot."""
    stop = threading.Event()
    violations: list[tuple[int, float, float]] = []
    backwards: list[tuple[int, int]] = []
    reads = [0] * READERS

    def reader(slot: int) -> None:
        last = -1
        while not stop.is_set():
            snap = get_context().snapshot()
            a = snap.spec.speculative_accept_threshold_single
            b = snap.schedule.schedule_conservativeness
            if a != b:
                violations.append((snap.generation, a, b))
            if snap.generation < last:
                backwards.append((last, snap.generation))
            last = snap.generation
            reads[slot] += 1

    sgconf_context.override("setup", speculative_accept_threshold_single=1.0, schedule_conservativeness=1.0)
    threads = [threading.Thread(target=reader, args=(i,)) for i in range(READERS)]
    for t in threads:
        t.start()
    try:
        with capture_logs() as logs:
            for i in range(OVERRIDES):
                value = (i % 1000) / 1000
                sgconf_context.override(
                    "stress", speculative_accept_threshold_single=value, schedule_conservativeness=value
                )
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert violations == []
    assert backwards == []
    assert all(n > 0 for n in reads)
    assert sgconf_context.generation == OVERRIDES + 1
    # the log keeps its window (observability.overrides_log_limit) and counts the rest
    limit = sgconf_context.snapshot().observability.overrides_log_limit
    assert len(sgconf_context.overrides_log()) == min(limit, OVERRIDES + 1)
    assert sgconf_context.dropped_overrides() == OVERRIDES + 1 - len(sgconf_context.overrides_log())
    assert len([e for e in logs if e["event"] == "config.override"]) == OVERRIDES


def test_concurrent_writers_serialize(sgconf_context):
    """Writers from several threads each commit exactly once per call; generations are gapless."""
    per_thread = 200

    seen: list[int] = []
    sgconf_context.subscribe(lambda event: seen.append(event.generation))

    def writer(n: int) -> None:
        for i in range(per_thread):
            sgconf_context.override(f"w{n}", stream_interval=1 + (i % 7))

    with capture_logs():
        threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    total = 4 * per_thread
    log = sgconf_context.overrides_log()
    window = min(total, sgconf_context.snapshot().observability.overrides_log_limit)
    assert [r.generation for r in log] == list(range(total - window + 1, total + 1))
    assert sgconf_context.dropped_overrides() == total - window
    assert sorted(seen) == list(range(1, total + 1))
    assert sgconf_context.generation == total


def test_readers_take_no_lock(sgconf_context):
    """A reader completes while another thread holds the writer lock."""
    seen = []
    with process.lock:
        t = threading.Thread(target=lambda: seen.append(get_schedule().page_size))
        t.start()
        t.join(timeout=10)
    assert seen == [1]
