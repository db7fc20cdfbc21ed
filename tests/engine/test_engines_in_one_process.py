"""Two engines in one process, each on a context of its own: built, served and overridden in two threads.

Each engine gets a context from `create_context()`; nothing is published process-wide, and
every read an engine makes (its plan, its scheduler thread, its storage) goes to its own.
The threads meet at barriers, so both engines are alive and serving at each step.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from engine.engine import Engine
from runtime import create_context, get_memory, get_schedule, is_published, use_context
from sgconf import load

PROMPT = "one process, two engines"


def _record(page_size: int, *storage: str) -> Any:
    argv = ["--max-total-tokens", "1024", "--page-size", str(page_size), "--enable-hierarchical-cache", *storage]
    return load(argv, env={}).record


def test_two_engines_in_two_threads_each_read_their_own_config(tmp_path) -> None:
    contexts = {
        "a": create_context(_record(4, "--hicache-storage-backend", "memory"), role="scheduler"),
        "b": create_context(
            _record(
                16,
                "--hicache-storage-backend",
                "file",
                "--hicache-storage-backend-extra-config",
                f'{{"dir": "{tmp_path}"}}',
            ),
            role="scheduler",
        ),
    }
    built = threading.Barrier(2, timeout=120)
    overridden = threading.Barrier(2, timeout=120)
    seen: dict[str, dict[str, Any]] = {}
    errors: list[BaseException] = []

    def serve(name: str, policy: str) -> None:
        ctx = contexts[name]
        try:
            engine = Engine(context=ctx)
            try:
                built.wait()  # both engines exist before either reads or changes anything
                first = engine.generate(PROMPT, max_new_tokens=4)
                engine.override_config("ops", schedule_policy=policy)
                overridden.wait()  # both overrides landed: each must still see only its own
                second = engine.generate(PROMPT, max_new_tokens=4)
                with use_context(ctx):
                    seen[name] = {
                        "page_size": get_schedule().page_size,
                        "policy": get_schedule().schedule_policy,
                        "storage": get_memory().hicache_storage_backend,
                        "pool_page_size": engine.memory.kv_pool.page_size,
                        "status": engine.storage_status()["hicache_storage_backend"],
                        "tokens": (first.token_ids, second.token_ids),
                        "generation": ctx.generation,
                    }
            finally:
                engine.shutdown()
        except BaseException as exc:  # reported below: a failed thread must fail the test
            errors.append(exc)
            built.abort()
            overridden.abort()

    threads = [threading.Thread(target=serve, args=("a", "lpm")), threading.Thread(target=serve, args=("b", "random"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert errors == []
    assert seen["a"]["page_size"] == seen["a"]["pool_page_size"] == 4
    assert seen["b"]["page_size"] == seen["b"]["pool_page_size"] == 16
    assert (seen["a"]["storage"], seen["b"]["storage"]) == ("memory", "file")
    assert (seen["a"]["status"], seen["b"]["status"]) == ("memory", "file")
    assert (seen["a"]["policy"], seen["b"]["policy"]) == ("lpm", "random")
    assert seen["a"]["generation"] == seen["b"]["generation"] == 1
    # the same tiny model and prompt: greedy tokens agree whatever the page size
    assert seen["a"]["tokens"][0] == seen["a"]["tokens"][1] == seen["b"]["tokens"][0]
    assert not is_published()


def test_an_engine_on_a_created_context_publishes_nothing() -> None:
    ctx = create_context(_record(4, "--hicache-storage-backend", "memory"), role="scheduler")
    with Engine(context=ctx) as engine:
        assert not is_published()
        engine.override_config("ops", schedule_policy="lpm")
        assert ctx.value("schedule_policy") == "lpm"
        with use_context(ctx):
            assert get_schedule().schedule_policy == "lpm"
    assert not is_published()


def test_an_engine_takes_a_record_or_a_context_not_both() -> None:
    record = _record(4)
    with pytest.raises(TypeError, match="exactly one"):
        Engine(record, context=create_context(record, role="scheduler"))
    with pytest.raises(TypeError, match="exactly one"):
        Engine()
