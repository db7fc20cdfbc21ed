"""Sliding-window KV release: long generations outgrow the SWA pool, prefix reuse stays exact."""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest

from engine.engine import Engine
from engine.model import reference_generate


@pytest.fixture
def make_engine(make_engine: Callable[..., Engine]) -> Callable[..., Engine]:
    """The suite's factory on a small pool, prefilled in chunks: the SWA pool is the one that runs out."""
    return functools.partial(make_engine, "--max-total-tokens", "128", "--chunked-prefill-size", "32")


def memory_storage(store: str) -> tuple[str, ...]:
    """Flags for a 256-token engine with the host tier and the in-process memory storage named `store`."""
    extra = f'{{"store": "{store}"}}'
    return (
        "--max-total-tokens",
        "256",
        "--enable-hierarchical-cache",
        "--hicache-storage-backend",
        "memory",
        "--hicache-storage-backend-extra-config",
        extra,
    )


PROMPT = "Sliding windows forget the distant past."  # 40 tokens


# without the radix cache the SWA pool is sized for what running requests can hold: two here
@pytest.mark.parametrize("argv", [(), ("--page-size", "4"), ("--disable-radix-cache", "--max-running-requests", "2")])
def test_generation_longer_than_the_swa_pool(make_engine, argv: tuple[str, ...]) -> None:
    """A request holding more tokens than the SWA pool has slots finishes and matches the dense reference."""
    engine = make_engine(*argv)
    swa_slots = engine.memory.describe()["swa_tokens"]
    ids = engine.tokenizer.encode(PROMPT)
    result = engine.generate(ids, max_new_tokens=80, ignore_eos=True)
    assert len(ids) + len(result.token_ids) > swa_slots
    assert result.token_ids == tuple(reference_generate(engine.model, ids, 80, ignore_eos=True))


def test_prefix_reuse_stops_where_the_window_was_released(make_engine) -> None:
    """A prompt ending inside released output reuses only the prompt; one ending at the live tail reuses it all."""
    engine = make_engine("--max-total-tokens", "256")  # room enough that nothing is evicted
    ids = engine.tokenizer.encode(PROMPT)
    first = list(engine.generate(ids, max_new_tokens=60, ignore_eos=True).token_ids)
    inside = ids + first[:30]  # its last 31 tokens lost their SWA K/V: only the 40 prompt tokens are usable
    r = engine.generate(inside, max_new_tokens=8, ignore_eos=True)
    assert r.stats.cached_tokens == 40
    assert r.token_ids == tuple(reference_generate(engine.model, inside, 8, ignore_eos=True))
    whole = ids + first  # the cached path ends in a live window: 99 tokens need KV, all cached
    r = engine.generate(whole, max_new_tokens=8, ignore_eos=True)
    assert r.stats.cached_tokens == 99
    assert r.token_ids == tuple(reference_generate(engine.model, whole, 8, ignore_eos=True))


def test_speculative_decoding_with_released_windows(make_engine) -> None:
    """Draft and target share the slot map: releasing behind both windows keeps greedy output exact."""
    engine = make_engine("--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--page-size", "2")
    ids = engine.tokenizer.encode(PROMPT)
    result = engine.generate(ids, max_new_tokens=70, ignore_eos=True)
    assert len(ids) + len(result.token_ids) > engine.memory.describe()["swa_tokens"]
    assert result.token_ids == tuple(reference_generate(engine.model, ids, 70, ignore_eos=True))


def test_storage_keeps_pages_whose_window_was_released(make_engine) -> None:
    """Pages are stored before their SWA slots go, so a fresh engine reuses a prefix ending in released output."""
    from mem_cache.hicache.memory_storage import clear_shared_stores

    clear_shared_stores()
    argv = (*memory_storage("swa-release"), "--hicache-storage-prefetch-policy", "wait_complete")
    first_engine = make_engine(*argv)
    ids = first_engine.tokenizer.encode(PROMPT)
    first = list(first_engine.generate(ids, max_new_tokens=60, ignore_eos=True).token_ids)
    first_engine.shutdown()  # flushes the writes
    fresh = make_engine(*argv)
    inside = ids + first[:40]  # ends where the first engine had released the SWA slots
    r = fresh.generate(inside, max_new_tokens=8, ignore_eos=True)
    assert r.stats.prefetched_tokens == 79  # every page but the token that is fed to decode
    assert r.token_ids == tuple(reference_generate(fresh.model, inside, 8, ignore_eos=True))
    clear_shared_stores()


def test_best_effort_prefetch_never_waits_for_storage(make_engine) -> None:
    """With best_effort a request runs without pages still being read; once they land, the next one loads them."""
    import threading

    from mem_cache.hicache.memory_storage import clear_shared_stores

    clear_shared_stores()
    argv = memory_storage("best-effort")
    writer = make_engine(*argv)
    ids = writer.tokenizer.encode(PROMPT)
    expected = writer.generate(ids, max_new_tokens=8).token_ids
    writer.shutdown()
    reader = make_engine(*argv)
    gate = threading.Event()
    backend = reader.hicache.controller.storage_backend
    read = backend._read
    backend._read = lambda key: (gate.wait(), read(key))[1]  # storage that answers only when told
    try:
        r = reader.generate(ids, max_new_tokens=8, timeout=20)
    finally:
        gate.set()
    assert r.token_ids == expected and r.stats.prefetched_tokens == 0
    # the lookup's existence checks did not queue behind the hung page reads (and time out)
    assert reader.hicache.controller.stats.read_timeouts == 0
    assert reader.hicache.controller.wait_idle(timeout=20)
    with reader._lock:
        reader.prefix_cache.reset()
    again = reader.generate(ids, max_new_tokens=8)
    assert again.token_ids == expected and again.stats.prefetched_tokens == 39
    clear_shared_stores()


# (without the radix cache the plan sizes the SWA pool to hold a whole chunk: nothing to cut)
@pytest.mark.parametrize("argv", [(), ("--page-size", "4")])
def test_prompt_longer_than_the_swa_pool_is_prefilled_in_smaller_chunks(make_engine, argv: tuple[str, ...]) -> None:
    """A prompt whose one chunk exceeds the SWA pool is cut to what fits, and its output equals the dense reference."""
    engine = make_engine("--chunked-prefill-size", "512", *argv)
    ids = [(i * 7) % 200 + 1 for i in range(120)]
    assert engine.memory.describe()["swa_tokens"] < len(ids) - 1  # the whole prompt cannot be one chunk
    result = engine.generate(ids, max_new_tokens=8, ignore_eos=True)
    assert result.token_ids == tuple(reference_generate(engine.model, ids, 8, ignore_eos=True))
    counters = engine.stats()["counters"]
    assert counters["prefill_tokens"] == 119 and counters["prefill_batches"] == 2
