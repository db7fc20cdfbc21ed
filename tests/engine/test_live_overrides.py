"""Post-publish overrides on a running engine: every hot field changes behaviour, between two steps, under load."""

from __future__ import annotations

import functools
import io
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import structlog

from engine.engine import Engine
from engine.errors import DrainTimeout
from engine.model import reference_generate
from engine.request_params import SamplingParams
from runtime.serving import get_memory
from sgconf.errors import ConfigError
from sgconf.serving import fields
from tests.engine.serving import while_clients_generate

PROMPT = "Overrides apply between two scheduler steps, never inside one."
# read by the data-parallel controller, covered by tests/engine/test_dp_serving.py and tests/runtime/test_distributed.py
GROUP_FIELDS = {"load_balance_method", "config_sync_timeout_s", "replica_stall_timeout_s"}


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    """A buffer for `configure_from_config(stream=...)` once an engine published; structlog restored after."""
    saved = structlog.get_config()
    yield io.StringIO()
    structlog.configure(**saved)


def ids(text: str) -> list[int]:
    return list(text.encode())


# -- one check per hot field -------------------------------------------------------------------


def check_log_level(make_engine: Callable[..., Engine], log_stream: io.StringIO) -> None:
    engine = make_engine()
    from runtime.logs import configure_from_config

    configure_from_config(stream=log_stream)
    probe = structlog.get_logger("probe")
    probe.debug("probe.before")
    engine.override_config("test", log_level="debug")
    probe.debug("probe.after")
    engine.override_config("test", log_level="error")
    probe.info("probe.muted")
    text = log_stream.getvalue()
    assert "probe.before" not in text and "probe.after" in text and "probe.muted" not in text


def check_log_requests(make_engine: Callable[..., Engine], log_stream: io.StringIO) -> None:
    from fastapi.testclient import TestClient

    from engine.http.app import create_app
    from engine.http.engine_backend import EngineBackend
    from runtime.logs import configure_from_config

    engine = make_engine()
    configure_from_config(stream=log_stream)
    client = TestClient(create_app(EngineBackend(engine)))
    body = {"text": "hi", "max_new_tokens": 2}
    assert client.post("/generate", json=body).status_code == 200
    text = log_stream.getvalue()
    assert "http.request" in text and "generate.request" not in text  # details at debug while log_requests is off
    engine.override_config("test", log_requests=True)
    assert client.post("/generate", json=body).status_code == 200
    text = log_stream.getvalue()
    assert text.count("generate.request") == 1 and text.count("generate.done") == 1
    assert "max_new_tokens=2" in text


def check_stream_interval(make_engine: Callable[..., Engine], log_stream: io.StringIO) -> None:
    engine = make_engine()
    assert [len(c.token_ids) for c in engine.stream(PROMPT, max_new_tokens=7, ignore_eos=True) if c.token_ids] == [
        1
    ] * 7
    engine.override_config("test", stream_interval=3)
    stream = engine.stream(PROMPT, max_new_tokens=7, ignore_eos=True)
    assert [len(c.token_ids) for c in stream if c.token_ids] == [3, 3, 1]
    assert len(stream.result().token_ids) == 7


def admission_order(engine: Engine, policy: str, running: int = 1) -> list[int]:
    """Queue four requests on a paused engine and return the order they are admitted in, `running` at a time."""
    engine.override_config("test", schedule_policy=policy, max_running_requests=running)
    engine.pause()
    reqs = [
        engine.submit(p, max_new_tokens=1)
        for p in ("zz unrelated prompt text", "A" * 40, "A" * 40 + "B", "yy other prompt")
    ]
    order: list[int] = []
    while len(order) < len(reqs):
        engine.step()
        order += [i for i, r in enumerate(reqs) if (r.row is not None or r.output) and i not in order]
    engine.resume()
    for r in reqs:
        engine.wait(r, timeout=60)
    return order


def check_schedule_policy(make_engine: Callable[..., Engine], log_stream: io.StringIO) -> None:
    engine = make_engine("--page-size", "4", "--random-seed", "3")
    engine.generate("A" * 40, max_new_tokens=1)  # puts the "A" prefix in the prefix cache
    assert admission_order(engine, "fcfs") == [0, 1, 2, 3]
    assert admission_order(engine, "lpm") == [2, 1, 0, 3]  # 40 cached tokens (+1 page of B ...), then arrival order
    assert admission_order(engine, "dfs-weight", running=2)[:2] == [
        1,
        2,
    ]  # the heavier "A" subtree first, node before child
    assert sorted(admission_order(engine, "random")) == [0, 1, 2, 3]


def check_max_running_requests(make_engine: Callable[..., Engine], log_stream: io.StringIO) -> None:
    engine = make_engine("--max-running-requests", "4")
    engine.pause()
    reqs = [engine.submit(PROMPT + str(i), max_new_tokens=10) for i in range(4)]
    engine.override_config("test", max_running_requests=2)
    engine.step()
    assert engine.busy_counts() == (2, 2)
    engine.override_config("test", max_running_requests=4)  # back up to the planned value
    engine.step()
    assert engine.busy_counts() == (0, 4)
    engine.resume()
    for r in reqs:
        engine.wait(r, timeout=60)
    with pytest.raises(ConfigError) as exc:
        engine.override_config("test", max_running_requests=5)
    assert exc.value.lines() == [
        "$.schedule.max_running_requests: 'max_running_requests' may be at most 4, the capacity planned at start-up"
        " (got 5) -- lower it, or restart with --max-running-requests 5 (from override test)"
    ]


def check_chunked_prefill_size(make_engine: Callable[..., Engine], log_stream: io.StringIO) -> None:
    engine = make_engine("--chunked-prefill-size", "32")
    engine.override_config("test", chunked_prefill_size=8)
    engine.pause()
    req = engine.submit("x" * 30, max_new_tokens=2)
    seen = []
    while req.output == []:
        engine.step()
        seen.append(req.kv_len)
    engine.resume()
    engine.wait(req, timeout=60)
    assert seen == [8, 16, 24, 30]  # 8-token chunks, the last 5, and the first decode in the same step
    with pytest.raises(ConfigError, match="'chunked_prefill_size' may be at most 32, the capacity planned at start-up"):
        engine.override_config("test", chunked_prefill_size=64)


def check_schedule_conservativeness(make_engine: Callable[..., Engine], log_stream: io.StringIO) -> None:
    engine = make_engine("--max-total-tokens", "160", "--disable-radix-cache", "--schedule-conservativeness", "0")

    def deferred(c: float) -> int:
        engine.override_config("test", schedule_conservativeness=c)
        before = engine.scheduler.counters["admission_deferred"]
        engine.pause()
        reqs = [engine.submit(PROMPT[:40] + str(i), max_new_tokens=60, ignore_eos=True) for i in range(2)]
        engine.step()
        engine.resume()
        for r in reqs:
            engine.wait(r, timeout=120)
        return engine.scheduler.counters["admission_deferred"] - before

    assert deferred(0.0) == 0  # both admitted at once
    assert deferred(4.0) >= 1  # the second waits for room the first will grow into


def batch_beside_short(make_engine: Callable[..., Engine], short_tokens: int) -> tuple[Engine, list[Any], Any]:
    """A paused engine of 8 rows with a 20-item batch queued, then one short request."""
    engine = make_engine("--max-running-requests", "8", "--schedule-conservativeness", "0", "--fair-unit-rows", "2")
    engine.pause()
    fan = SamplingParams(max_new_tokens=30, ignore_eos=True)
    batch = engine.submit_batch([(f"{PROMPT[:20]} {i}", fan) for i in range(20)])
    return engine, batch, engine.submit(PROMPT[:20], max_new_tokens=short_tokens, ignore_eos=True)


def rows_of(reqs: list[Any]) -> int:
    return sum(r.row is not None for r in reqs)


def check_fair_unit_rows(make_engine: Callable[..., Engine], log_stream: io.StringIO) -> None:
    engine, batch, short = batch_beside_short(make_engine, 30)
    engine.step()
    assert (rows_of(batch), short.row is not None) == (2, True)
    engine.override_config("test", fair_unit_rows=0)
    engine.step()
    assert rows_of(batch) == 7
    engine.resume()
    for r in [*batch, short]:
        engine.wait(r, timeout=120)


def check_fair_hold_steps(make_engine: Callable[..., Engine], log_stream: io.StringIO) -> None:
    engine, batch, short = batch_beside_short(make_engine, 1)
    engine.step()  # the short request's only step, beside 2 of the batch
    assert short.finish_reason == "length" and rows_of(batch) == 2
    engine.override_config("test", fair_hold_steps=1)
    engine.step()  # the step after: still held
    assert rows_of(batch) == 2
    engine.override_config("test", fair_hold_steps=0)
    engine.step()
    assert rows_of(batch) == 8
    engine.resume()
    for r in batch:
        engine.wait(r, timeout=120)


def check_enable_mixed_chunk(make_engine: Callable[..., Engine], log_stream: io.StringIO) -> None:
    engine = make_engine()
    engine.pause()
    running = engine.submit(PROMPT[:20], max_new_tokens=30, ignore_eos=True)
    engine.step()  # prefilled, and its first token decoded
    counters = engine.scheduler.counters
    engine.submit(PROMPT[:30], max_new_tokens=2, ignore_eos=True)
    engine.step()  # the newcomer's prefill and the running request's next token: one forward
    assert counters["mixed_batches"] == 1
    engine.override_config("test", enable_mixed_chunk=False)
    engine.submit(PROMPT[:25], max_new_tokens=2, ignore_eos=True)
    engine.step()  # a prefill forward, then a decode forward
    assert counters["mixed_batches"] == 1 and counters["prefill_batches"] == 3
    engine.resume()
    engine.wait(running, timeout=120)


def spec_engine(make_engine: Callable[..., Engine]) -> Engine:
    return make_engine("--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3")


def check_speculative_num_steps(make_engine: Callable[..., Engine], log_stream: io.StringIO) -> None:
    engine = spec_engine(make_engine)
    engine.generate(PROMPT, max_new_tokens=4)
    assert engine.speculative.num_steps == 3
    engine.override_config("test", speculative_num_steps=1, speculative_num_draft_tokens=2)
    engine.generate(PROMPT, max_new_tokens=4)
    assert engine.speculative.num_steps == 1
    with pytest.raises(ConfigError, match="'speculative_num_steps' may be at most 3, the capacity planned at start-up"):
        engine.override_config("test", speculative_num_steps=5, speculative_num_draft_tokens=6)


def check_speculative_num_draft_tokens(make_engine: Callable[..., Engine], log_stream: io.StringIO) -> None:
    engine = spec_engine(make_engine)
    engine.override_config("test", speculative_num_steps=2, speculative_num_draft_tokens=3)
    result = engine.generate(PROMPT, max_new_tokens=8, ignore_eos=True)
    assert engine.speculative.num_steps == 2  # chain of draft_tokens - 1
    assert result.token_ids == tuple(reference_generate(engine.model, ids(PROMPT), 8, ignore_eos=True))
    with pytest.raises(ConfigError, match="'speculative_num_draft_tokens' may be at most 4, the capacity planned"):
        engine.override_config("test", speculative_num_steps=4, speculative_num_draft_tokens=5)


def check_speculative_eagle_topk(make_engine: Callable[..., Engine], log_stream: io.StringIO) -> None:
    engine = make_engine(
        "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "2", "--speculative-eagle-topk", "2"
    )
    engine.override_config("test", speculative_eagle_topk=1, speculative_num_draft_tokens=3)
    engine.generate(PROMPT, max_new_tokens=3)
    with pytest.raises(
        ConfigError, match="'speculative_eagle_topk' may be at most 2, the capacity planned at start-up"
    ):
        engine.override_config("test", speculative_eagle_topk=3, speculative_num_draft_tokens=7)


def check_speculative_accept_threshold_single(make_engine: Callable[..., Engine], log_stream: io.StringIO) -> None:
    engine = spec_engine(make_engine)

    def accept_length(threshold: float) -> float:
        engine.override_config("test", speculative_accept_threshold_single=threshold)
        r = engine.generate(PROMPT, max_new_tokens=24, temperature=5.0, seed=1, ignore_eos=True)
        assert r.stats.spec_accept_length is not None
        return r.stats.spec_accept_length

    assert accept_length(0.0) == 4.0  # every draft token accepted: steps + 1 per verify
    assert accept_length(1.0) < 4.0  # only the sampler's own picks


def check_enable_torch_compile(make_engine: Callable[..., Engine], log_stream: io.StringIO) -> None:
    graphs: list[Any] = []

    def counting(gm: Any, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    engine = make_engine(compile_backend=counting)
    eager = engine.generate(PROMPT, max_new_tokens=4).token_ids
    engine.override_config("test", enable_torch_compile=True)
    assert engine.generate(PROMPT, max_new_tokens=4).token_ids == eager
    first = len(graphs)
    assert first > 0 and engine.runner.compiles == 1 and engine.runner.compiled_forwards > 0
    engine.override_config("test", schedule_conservativeness=0.5)  # a counted field: a new fingerprint
    assert engine.generate(PROMPT, max_new_tokens=4).token_ids == eager
    assert engine.runner.compiles == 2 and len(graphs) > first


def check_drain_timeout_s(make_engine: Callable[..., Engine], log_stream: io.StringIO) -> None:
    engine = make_engine("--enable-hierarchical-cache", "--drain-timeout-s", "0.1")
    engine.pause()
    req = engine.submit(PROMPT, max_new_tokens=3)
    engine.step()  # running, and the paused loop will not finish it
    with pytest.raises(DrainTimeout, match="the drain did not come within 0.1 s"):
        engine.attach_storage_backend("memory")
    engine.resume()
    engine.wait(req, timeout=60)


def _edge_client(engine: Engine) -> Any:
    from fastapi.testclient import TestClient

    from engine.http.app import create_app
    from engine.http.engine_backend import EngineBackend

    return TestClient(create_app(EngineBackend(engine)))


def check_max_request_body_bytes(make_engine: Callable[..., Engine], log_stream: io.StringIO) -> None:
    client = _edge_client(make_engine())
    body = {"input_ids": [72] * 400, "max_new_tokens": 1}  # about 1.6 kB of JSON
    assert client.post("/generate", json=body).status_code == 200
    from runtime.context import get_context

    get_context().override("test", max_request_body_bytes=1024)
    assert client.post("/generate", json=body).status_code == 413


def _refused_after(field: str, value: int, body: dict[str, Any], make_engine: Callable[..., Engine]) -> None:
    from runtime.context import get_context

    client = _edge_client(make_engine())
    assert client.post("/generate", json=body).status_code == 200
    get_context().override("test", **{field: value})
    r = client.post("/generate", json=body)
    assert r.status_code == 422 and f"'{field}'" in "".join(r.json()["errors"])


def check_max_json_depth(make_engine: Callable[..., Engine], log_stream: io.StringIO) -> None:
    _refused_after(
        "max_json_depth",
        2,
        {"text": "a", "sampling_params": {"max_new_tokens": 1, "stop_token_ids": [72]}},
        make_engine,
    )


def check_max_json_integer_digits(make_engine: Callable[..., Engine], log_stream: io.StringIO) -> None:
    _refused_after("max_json_integer_digits", 2, {"text": "a", "max_new_tokens": 1, "seed": 123}, make_engine)


def check_max_prompt_chars(make_engine: Callable[..., Engine], log_stream: io.StringIO) -> None:
    _refused_after("max_prompt_chars", 3, {"text": "abcd", "max_new_tokens": 1}, make_engine)


def check_max_batch_items(make_engine: Callable[..., Engine], log_stream: io.StringIO) -> None:
    _refused_after("max_batch_items", 2, {"text": ["a", "b", "c"], "max_new_tokens": 1}, make_engine)


def check_max_batch_requests(make_engine: Callable[..., Engine], log_stream: io.StringIO) -> None:
    _refused_after("max_batch_requests", 2, {"input_ids": [[72], [73], [74]], "max_new_tokens": 1}, make_engine)


def check_body_timeout_s(make_engine: Callable[..., Engine], log_stream: io.StringIO) -> None:
    import asyncio

    from engine.http.limits import BodyLimits, read_body
    from engine.http.problems import HTTPProblem
    from runtime.context import get_context

    make_engine()

    class Stalled:  # a request whose body never comes
        headers: dict[str, str] = {}

        async def stream(self) -> Any:
            await asyncio.Event().wait()
            yield b""

    assert BodyLimits.current().timeout_s == 30.0
    get_context().override("test", body_timeout_s=0.05)
    with pytest.raises(HTTPProblem) as info:
        asyncio.run(read_body(Stalled(), BodyLimits.current()))  # type: ignore[arg-type]
    assert info.value.status == 408 and "'body_timeout_s' (0.05 s" in info.value.detail


def check_request_timeout_s(make_engine: Callable[..., Engine], log_stream: io.StringIO) -> None:
    engine = make_engine()
    engine.pause()
    before = engine.submit(PROMPT, max_new_tokens=1)
    engine.override_config("test", request_timeout_s=5)
    after = engine.submit(PROMPT, max_new_tokens=1)
    assert (before.timeout_s, after.timeout_s) == (600.0, 5)
    engine.resume()
    engine.wait(before, timeout=60)
    engine.wait(after, timeout=60)


HOT_CHECKS: dict[str, Callable[..., None]] = {
    "max_request_body_bytes": check_max_request_body_bytes,
    "enable_mixed_chunk": check_enable_mixed_chunk,
    "max_json_depth": check_max_json_depth,
    "max_json_integer_digits": check_max_json_integer_digits,
    "max_prompt_chars": check_max_prompt_chars,
    "request_timeout_s": check_request_timeout_s,
    "max_batch_items": check_max_batch_items,
    "max_batch_requests": check_max_batch_requests,
    "body_timeout_s": check_body_timeout_s,
    "log_level": check_log_level,
    "log_requests": check_log_requests,
    "stream_interval": check_stream_interval,
    "schedule_policy": check_schedule_policy,
    "max_running_requests": check_max_running_requests,
    "chunked_prefill_size": check_chunked_prefill_size,
    "schedule_conservativeness": check_schedule_conservativeness,
    "fair_unit_rows": check_fair_unit_rows,
    "fair_hold_steps": check_fair_hold_steps,
    "drain_timeout_s": check_drain_timeout_s,
    "speculative_num_steps": check_speculative_num_steps,
    "speculative_num_draft_tokens": check_speculative_num_draft_tokens,
    "speculative_eagle_topk": check_speculative_eagle_topk,
    "speculative_accept_threshold_single": check_speculative_accept_threshold_single,
    "enable_torch_compile": check_enable_torch_compile,
}


def test_every_hot_field_has_a_check() -> None:
    """The table below covers every field declared hot (the group's own fields are tested with the group)."""
    hot = {name for name, info in fields().items() if info.setting.hot}
    assert hot == set(HOT_CHECKS) | GROUP_FIELDS


# torch.compile runs the C++ compiler in child processes: that case is slow
@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=[pytest.mark.slow] if n == "enable_torch_compile" else []) for n in sorted(HOT_CHECKS)],
)
def test_hot_field_changes_behaviour_on_a_running_engine(name: str, make_engine, log_stream) -> None:
    """Overriding the field on a running engine changes what the engine does, from the next step on."""
    HOT_CHECKS[name](make_engine, log_stream)


# -- step boundaries under load --------------------------------------------------------------------


def test_hundred_overrides_between_steps_of_eight_requests(make_engine) -> None:
    """Eight requests stepped by hand with an override before every step: all 100 land between steps, outputs exact."""
    engine = make_engine("--max-running-requests", "8")
    commits: list[tuple[int, bool]] = []
    engine.context.subscribe(lambda ev: commits.append((ev.generation, engine.stepping)))
    engine.pause()
    prompts = [f"{PROMPT} client {i}" for i in range(8)]
    reqs = [engine.submit(p, max_new_tokens=20, ignore_eos=True) for p in prompts]
    values: list[Callable[[int], dict[str, Any]]] = [
        lambda i: {"stream_interval": 1 + i % 4},
        lambda i: {"schedule_conservativeness": (i % 3) / 2},
        lambda i: {"schedule_policy": ("fcfs", "lpm", "random")[i % 3]},
        lambda i: {"max_running_requests": 4 + i % 5},
    ]
    generations = []
    for i in range(100):
        receipt = engine.override_config("load", **values[i % len(values)](i))
        generations.append(receipt.generation)
        engine.step()
    engine.resume()
    results = [engine.wait(r, timeout=120) for r in reqs]
    assert generations == list(range(1, 101))
    assert [g for g, _ in commits] == generations and not any(stepping for _, stepping in commits)
    assert engine.scheduler.counters["steps_across_generations"] == 0
    for p, r in zip(prompts, results, strict=True):
        assert r.token_ids == tuple(reference_generate(engine.model, ids(p), 20, ignore_eos=True))


def test_overrides_from_a_thread_while_eight_clients_generate(make_engine) -> None:
    """Eight client threads and one override thread on the running loop: every override and every generation succeeds."""
    engine = make_engine()
    done = threading.Event()

    def client(i: int) -> list[tuple[int, ...]]:
        return [engine.generate(f"{PROMPT} {i}.{j}", max_new_tokens=8).token_ids for j in range(3)]

    def overrides() -> list[int]:
        out = []
        for i in range(100):
            out.append(engine.override_config("load", stream_interval=1 + i % 3).generation)
        done.set()
        return out

    with ThreadPoolExecutor(9) as pool:
        clients = [pool.submit(client, i) for i in range(8)]
        tuner = pool.submit(overrides)
        outputs = [c.result(timeout=300) for c in clients]
        assert tuner.result(timeout=300) == list(range(1, 101))
    assert done.is_set()
    assert all(len(o) == 3 and all(len(t) == 8 for t in o) for o in outputs)
    assert engine.scheduler.counters["steps_across_generations"] == 0


def test_attach_under_load_drains_then_applies(make_engine) -> None:
    """An attach while clients generate pauses admission, waits for running requests, applies with none running."""
    engine = make_engine("--enable-hierarchical-cache")
    running_at_commit: list[int] = []
    engine.context.subscribe(
        lambda ev: running_at_commit.append(engine.busy_counts()[1]), fields=["hicache_storage_backend"]
    )
    attach = functools.partial(engine.attach_storage_backend, "memory")
    receipt = while_clients_generate(engine, attach, clients=8, requests=4, tokens=6)
    assert receipt.generation == 1 and get_memory().hicache_storage_backend == "memory"
    assert running_at_commit == [0]
    assert engine.scheduler.admission_paused == 0


def test_a_drain_that_times_out_changes_nothing(make_engine) -> None:
    """DrainTimeout leaves config, storage and admission as before; queued requests still run."""
    engine = make_engine("--enable-hierarchical-cache", "--drain-timeout-s", "0.1")
    engine.pause()
    running = engine.submit(PROMPT, max_new_tokens=3)
    engine.step()
    queued = engine.submit(PROMPT + "!", max_new_tokens=2)
    with pytest.raises(DrainTimeout) as exc:
        engine.attach_storage_backend("memory")
    assert (exc.value.queued, exc.value.running, exc.value.retry_after_s) == (1, 1, 0.1)
    assert engine.context.generation == 0 and engine.hicache.controller.storage_backend is None
    assert engine.scheduler.admission_paused == 0
    engine.resume()
    assert len(engine.wait(running, timeout=60).token_ids) == 3
    assert len(engine.wait(queued, timeout=60).token_ids) == 2


def test_restart_fields_are_refused_with_the_reason(make_engine) -> None:
    """A field declared restart (page_size) is refused after publish, naming the launch flag; nothing changes."""
    engine = make_engine()
    with pytest.raises(ConfigError) as exc:
        engine.override_config("test", page_size=4)
    assert exc.value.lines() == [
        "$.schedule.page_size: 'page_size' is not hot and source 'test' is not on its allow-list (got 4)"
        " -- set --page-size at launch (from override test)"
    ]
    assert engine.context.generation == 0
