"""Receipts the engine hands out revert through the engine: at its step boundary, after a drain, side effects undone."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from engine.engine import Engine
from engine.errors import StorageRefused
from runtime import OverrideReceipt, RevertConflict
from runtime.serving import get_memory, get_serving
from tests.engine.serving import while_clients_generate

PROMPT = "A revert is a change like any other: it waits for the step boundary."


def backend_of(engine: Engine) -> str | None:
    assert engine.hicache is not None
    return engine.hicache.controller.storage_status().backend


def test_reverting_an_attach_detaches_the_backend_after_a_drain(make_engine) -> None:
    """`receipt.revert()` of an attach goes through the engine: drained, detached, config None, all in one change."""
    engine = make_engine("--enable-hierarchical-cache")
    running_at_commit: list[int] = []
    engine.context.subscribe(
        lambda ev: running_at_commit.append(engine.busy_counts()[1]), fields=["hicache_storage_backend"]
    )
    receipt = engine.attach_storage_backend("memory")
    assert receipt.owner_name == "engine" and "owner='engine'" in repr(receipt)
    assert backend_of(engine) == "memory"
    undone = while_clients_generate(engine, receipt.revert, clients=4, requests=3, tokens=5)
    assert get_memory().hicache_storage_backend is None and backend_of(engine) is None
    assert undone.source == "revert:hicache.attach" and undone.owner_name == "engine"
    assert running_at_commit == [0, 0]  # the attach and its revert each ran with nothing running
    # a revert of the revert attaches again, through the engine too
    undone.revert()
    assert get_memory().hicache_storage_backend == "memory" and backend_of(engine) == "memory"


def test_reverting_a_second_attach_attaches_the_previous_backend_again(make_engine, tmp_path: Path) -> None:
    engine = make_engine("--enable-hierarchical-cache")
    engine.attach_storage_backend("file", extra_config={"dir": str(tmp_path / "kv")})
    second = engine.attach_storage_backend("memory")
    second.revert()
    assert get_memory().hicache_storage_backend == "file" and backend_of(engine) == "file"
    assert engine.hicache is not None and engine.hicache.storage_dir() == str(tmp_path / "kv")


def test_a_previous_backend_that_cannot_open_again_leaves_everything_as_it_was(make_engine, tmp_path: Path) -> None:
    """All or nothing: when the file backend cannot come back, the memory one stays attached and the config says so."""
    engine = make_engine("--enable-hierarchical-cache")
    kv = tmp_path / "kv"
    engine.attach_storage_backend("file", extra_config={"dir": str(kv)})
    second = engine.attach_storage_backend("memory")
    shutil.rmtree(kv)
    kv.write_text("not a directory")
    generation = engine.context.generation
    with pytest.raises(StorageRefused):
        second.revert()
    assert get_memory().hicache_storage_backend == "memory" and backend_of(engine) == "memory"
    assert engine.context.generation == generation + 2  # the revert and its rollback
    assert [r.source for r in engine.context.overrides_log()][-2:] == [
        "revert:hicache.attach",
        "rollback:revert:hicache.attach",
    ]


def test_a_revert_that_bypasses_the_engine_is_refused(make_engine) -> None:
    """The context refuses to undo the engine's change itself, naming the sanctioned call; nothing changes."""
    engine = make_engine("--enable-hierarchical-cache")
    receipt = engine.attach_storage_backend("memory")
    bypasses = [
        lambda: engine.context.revert(receipt),
        lambda: OverrideReceipt(engine.context, receipt.record, receipt.snapshot).revert(),
    ]
    for bypass in bypasses:
        with pytest.raises(RevertConflict) as exc:
            bypass()
        assert exc.value.lines() == [
            "$.memory.hicache_storage_backend: the override from 'hicache.attach' (generation 1) was made through the "
            "engine, which must undo it (step boundary, drain, side effects); reverting it from the context would skip "
            "that -- call receipt.revert() on the receipt it returned (from override hicache.attach)"
        ]
    assert engine.context.generation == 1 and backend_of(engine) == "memory"


def test_reverts_of_step_fields_land_between_steps(make_engine) -> None:
    """Fifty overrides and their reverts on a hand-stepped engine: every one lands between two steps."""
    engine = make_engine("--max-running-requests", "8")
    commits: list[tuple[int, bool]] = []
    engine.context.subscribe(lambda ev: commits.append((ev.generation, engine.stepping)))
    engine.pause()
    reqs = [engine.submit(f"{PROMPT} {i}", max_new_tokens=20, ignore_eos=True) for i in range(8)]
    for i in range(50):
        receipt = engine.override_config("load", stream_interval=2 + i % 3)
        engine.step()
        assert receipt.owner_name == "engine"
        receipt.revert()
        assert get_serving().stream_interval == 1
        engine.step()
    engine.resume()
    assert all(len(engine.wait(r, timeout=120).token_ids) == 20 for r in reqs)
    assert [g for g, _ in commits] == list(range(1, 101)) and not any(stepping for _, stepping in commits)
    assert engine.scheduler.counters["steps_across_generations"] == 0


def test_the_context_s_own_receipts_say_so(make_engine) -> None:
    engine = make_engine()
    receipt: Any = engine.context.override("ops", stream_interval=3)
    assert receipt.owner_name == "context" and receipt.owner is None
    receipt.revert()
    assert get_serving().stream_interval == 1
