"""One client cannot hurt the others: fair admission of batches, abort on disconnect, connection timeouts."""

from __future__ import annotations

import gc
import json
import socket
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from engine.engine import Engine, EngineStopped
from engine.errors import InvalidRequest, RequestCancelled, RequestRejected
from engine.http.app import create_app
from engine.http.engine_backend import EngineBackend
from engine.request_params import SamplingParams
from tests.engine.serving import live_server
from tests.support import wait_until

pytestmark = pytest.mark.slow  # starts processes or servers: `make test-fast` leaves it out

DEADLINE_S = 60.0


@pytest.fixture
def engine() -> Iterator[Engine]:
    eng = Engine.from_args(["--max-total-tokens", "4096", "--max-running-requests", "4", "--header-timeout-s", "0.5"])
    try:
        yield eng
    finally:
        eng.shutdown()


# -- fair admission ---------------------------------------------------------------------------


def test_a_fan_out_batch_cannot_hold_back_a_short_request(engine: Engine) -> None:
    """A 64-item batch fills every row; a later short request runs as soon as one row frees, not after the batch."""
    engine.pause()
    fan = SamplingParams(max_new_tokens=8, ignore_eos=True)
    batch = engine.submit_batch([(f"fan-out item {i}", fan) for i in range(64)])
    engine.step()
    assert engine.busy_counts() == (60, 4)
    short = engine.submit("light client", max_new_tokens=4, ignore_eos=True)
    steps = 0
    while not short.done.is_set():
        assert engine.step()
        steps += 1
    # one batch item's remaining 8 decodes free a row, then the short request's prefill and 4 decodes
    assert steps <= 8 + 1 + 4
    assert sum(r.done.is_set() for r in batch) <= 8  # the batch is far from done: the short one went ahead
    engine.resume()
    for req in batch:
        engine.wait(req, timeout=DEADLINE_S)


def test_a_submit_does_not_wait_behind_a_step_in_flight(engine: Engine) -> None:
    """A client's request is queued while a step holds the engine lock: it never waits for the other work's steps.

    (The loop takes that lock again step after step, so a waiting submit could sit out a
    whole fan-out batch before its request was even queued.)
    """
    engine.pause()
    queued: list[Any] = []
    with engine._lock:  # what a step in flight holds
        worker = threading.Thread(target=lambda: queued.append(engine.submit("light client", max_new_tokens=2)))
        worker.start()
        worker.join(DEADLINE_S)
        assert queued, "submit waited for the engine lock"
    assert engine.busy_counts() == (1, 0)
    engine.resume()
    assert engine.wait(queued[0], timeout=DEADLINE_S).token_ids


def test_a_submit_after_shutdown_is_refused() -> None:
    """Without the engine lock a submit still cannot slip in after the shutdown failed what was queued."""
    from runtime import withdraw

    eng = Engine.from_args(["--max-total-tokens", "256"])
    eng.shutdown(unpublish=False)  # its config stays readable, so the refusal is the engine's own
    try:
        with pytest.raises(EngineStopped, match="the engine is shut down"):
            eng.submit("too late", max_new_tokens=1)
        eng._stopping = False  # as if the submit had passed that check just before the shutdown
        with pytest.raises(EngineStopped, match="the engine is shut down"):
            eng.submit("too late", max_new_tokens=1)
        assert eng.busy_counts() == (0, 0)
    finally:
        eng._stopping = True
        withdraw(eng.context)


def test_units_of_work_share_rows_in_turn(engine: Engine) -> None:
    """Two batches submitted one after the other alternate for rows instead of running back to back."""
    engine.pause()
    p = SamplingParams(max_new_tokens=2, ignore_eos=True)
    first = engine.submit_batch([(f"a{i}", p) for i in range(6)])
    second = engine.submit_batch([(f"b{i}", p) for i in range(6)])
    engine.step()
    running = {r.rid for r in [*engine.scheduler.prefilling, *engine.scheduler.decoding]}
    assert running == {first[0].rid, first[1].rid, second[0].rid, second[1].rid}
    engine.resume()
    for req in [*first, *second]:
        engine.wait(req, timeout=DEADLINE_S)


def test_an_http_batch_is_one_unit_of_work(engine: Engine) -> None:
    """/generate with a list of texts queues every item at once, in one group, before any runs."""
    client = TestClient(create_app(EngineBackend(engine)))
    engine.pause()
    answers: list[Any] = []
    body = {"text": [f"item {i}" for i in range(50)], "max_new_tokens": 1}
    thread = threading.Thread(target=lambda: answers.append(client.post("/generate", json=body)))
    thread.start()
    wait_until("the batch to be queued", lambda: engine.busy_counts()[0] == 50)
    with engine.scheduler._inbox_lock:
        groups = {r.group for r in engine.scheduler._inbox}
    assert len(groups) == 1
    engine.resume()
    thread.join(DEADLINE_S)
    assert answers[0].status_code == 200 and len(answers[0].json()) == 50


def test_a_finished_http_batch_is_freed_without_the_cycle_collector(engine: Engine, monkeypatch) -> None:
    """A unit's requests go when their answer does: none is kept in a cycle for a full collection to find.

    Under a fan-out client, finished requests held in cycles piled up in the oldest
    generation and each full collection that freed them paused the server for 20-40 ms.
    """
    made: list[weakref.ref[Any]] = []
    submit_batch = engine.submit_batch

    def recording(*args: Any, **kwargs: Any) -> Any:
        reqs = submit_batch(*args, **kwargs)
        made.extend(weakref.ref(r) for r in reqs)
        return reqs

    monkeypatch.setattr(engine, "submit_batch", recording)
    client = TestClient(create_app(EngineBackend(engine)))
    client.post("/generate", json={"text": "warm", "max_new_tokens": 1})  # the app's own first-use objects
    gc.collect()
    made.clear()
    gc.disable()
    try:
        answer = client.post("/generate", json={"text": [f"item {i}" for i in range(20)], "max_new_tokens": 2})
        assert answer.status_code == 200 and len(answer.json()) == 20
        wait_until("the engine to let go of its finished requests", lambda: engine.busy_counts() == (0, 0))
        # the answer can leave while the step that finished the batch still runs, its locals on the engine's stack:
        # pause() returns once that step is over
        engine.pause()
        assert len(made) == 20
        assert [ref for ref in made if ref() is not None] == []
    finally:
        gc.enable()


def test_a_batch_checks_each_distinct_ask_once_and_keeps_items_apart() -> None:
    """Items asking the same share one checked SamplingParams; an item asking otherwise gets its own."""
    from engine.request_units import unit_items

    same = {"prompt_or_ids": "a", "temperature": 0.5, "max_new_tokens": 3, "timeout_s": 5}
    items = unit_items([same, {**same, "prompt_or_ids": "b"}, {**same, "temperature": 0.0}])
    assert [p for p, _ in items] == ["a", "b", "a"]
    assert items[0][1] is items[1][1] and items[0][1].temperature == 0.5
    assert items[2][1] is not items[0][1] and items[2][1].temperature == 0.0 and items[2][1].max_new_tokens == 3


def test_a_batch_sharing_its_values_still_checks_each_item_asking_otherwise() -> None:
    """Items holding the very objects of the item before share its sampling; an equal but other value is checked."""
    from engine.request_units import unit_items

    common = {"max_new_tokens": 1, "stop": ["\n"], "timeout_s": None}
    items = unit_items([{"prompt_or_ids": p, **common} for p in ("a", "b", "c")])
    assert items[0][1] is items[1][1] is items[2][1] and items[0][1].stop == ("\n",)
    with pytest.raises(InvalidRequest) as info:  # True == 1, but a boolean is no token count
        unit_items([{"prompt_or_ids": "a", **common}, {"prompt_or_ids": "b", **common, "max_new_tokens": True}])
    assert info.value.lines() == ["$.max_new_tokens: expected an integer, not a boolean (got True)"]
    extra = unit_items([{"prompt_or_ids": "a", **common}, {"prompt_or_ids": "b", **common, "seed": 7}])
    assert (extra[0][1].seed, extra[1][1].seed) == (None, 7)
    fewer = unit_items([{"prompt_or_ids": "a", **common}, {"prompt_or_ids": "b", "timeout_s": None}])
    assert (fewer[0][1].stop, fewer[1][1].stop) == (("\n",), ())


def test_a_batch_is_refused_at_its_first_bad_item(engine: Engine) -> None:
    """Prompts are checked before the batch is tokenized, yet the refusal is the first bad item's; nothing is queued."""
    too_long = SamplingParams(max_new_tokens=1 << 20)
    with pytest.raises(RequestRejected, match="exceeds the context length"):
        engine.submit_batch([("a", too_long), ("", SamplingParams())])
    with pytest.raises(InvalidRequest) as info:
        engine.submit_batch([("a", SamplingParams()), ("", SamplingParams()), ("b", too_long)])
    assert info.value.lines() == ["$.prompt_or_ids: 0 characters: the prompt is empty -- send at least 1"]
    assert engine.busy_counts() == (0, 0)


def test_wait_all_answers_in_order_and_raises_as_the_first_failed(engine: Engine) -> None:
    """One wait for a unit gives each item's result in order; a cancelled item is raised as `wait` raises it."""
    reqs = engine.submit_batch([(p, SamplingParams(max_new_tokens=2)) for p in ("one", "two", "three")])
    results = engine.wait_all(reqs)
    assert [len(r.token_ids) for r in results] == [2, 2, 2]
    assert [r.stats.prompt_tokens for r in results] == [3, 3, 5]
    engine.pause()
    held = engine.submit_batch([(p, SamplingParams()) for p in ("x", "y")])
    engine.cancel(held[1:])
    engine.resume()
    with pytest.raises(RequestCancelled, match="the client went away"):
        engine.wait_all(held)


def test_wait_all_cancels_the_rest_of_a_unit_once_an_item_fails(engine: Engine) -> None:
    """An item that fails fails its unit: the items still waiting are cancelled, not left to run for nobody."""
    engine.scheduler.admission_paused += 1  # steps still run (cancels), but nothing is admitted
    try:
        held = engine.submit_batch([(p, SamplingParams()) for p in ("x", "y", "z")])
        engine.cancel(held[:1])
        with pytest.raises(RequestCancelled, match="the client went away"):
            engine.wait_all(held)
        assert all(r.done.wait(DEADLINE_S) for r in held[1:])
        assert [r.finish_reason for r in held] == ["cancelled"] * 3
        assert engine.busy_counts() == (0, 0)
    finally:
        engine.scheduler.admission_paused -= 1


def test_fan_out_limits_name_their_setting(engine: Engine) -> None:
    """Too many prompts, or prompts x n over max_batch_requests, are refused naming the setting; nothing runs."""
    client = TestClient(create_app(EngineBackend(engine)))
    engine.override_config("test", max_batch_requests=20, max_batch_items=8)
    r = client.post("/generate", json={"text": ["x"] * 9, "max_new_tokens": 1})
    assert r.status_code == 422
    assert r.json()["errors"] == ["$.text: 9 prompts, more than 'max_batch_items' (8) -- split the batch"]
    r = client.post("/v1/completions", json={"prompt": ["x"] * 8, "n": 3, "max_tokens": 1})
    assert r.status_code == 400 and r.json()["error"]["param"] == "n"
    assert r.json()["error"]["message"] == (
        "$.n: 8 prompts x n=3 is 24 requests, more than 'max_batch_requests' (20) -- send fewer prompts or a smaller n"
    )
    assert engine.scheduler.counters["admitted"] == 0


# -- abort on disconnect ----------------------------------------------------------------------

ROUTES = {
    "/generate": {"text": "{p}", "max_new_tokens": 300, "ignore_eos": True},
    "/v1/completions": {"prompt": "{p}", "max_tokens": 300, "ignore_eos": True, "temperature": 0},
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "{p}"}], "max_tokens": 300, "ignore_eos": True},
}


def _request(path: str, body: dict[str, Any], port: int) -> bytes:
    raw = json.dumps(body).encode()
    head = f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
    return head.encode() + f"content-length: {len(raw)}\r\n\r\n".encode() + raw


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("path", list(ROUTES))
def test_a_closed_socket_cancels_its_request_and_frees_its_kv(engine: Engine, path: str, stream: bool) -> None:
    """The client closes its socket mid-request: the request leaves at the next step and KV use is back to idle."""
    idle = engine.memory.allocator.available_size()
    body = json.loads(json.dumps(ROUTES[path]).replace("{p}", f"disconnect {path} {stream}"))
    body["stream"] = stream
    engine.pause()
    with live_server(create_app(EngineBackend(engine))) as (host, port):
        sock = socket.create_connection((host, port), timeout=DEADLINE_S)
        sock.sendall(_request(path, body, port))
        wait_until("the request to be queued", lambda: engine.busy_counts() == (1, 0))
        for _ in range(3):  # prefill and two decodes: the request now holds KV
            engine.step()
        assert engine.memory.allocator.available_size() < idle
        if stream:  # read the first event, so the answer has really begun
            received = b""
            while b"data: " not in received:
                received += sock.recv(65536)
        sock.close()
        wait_until("the server to notice the closed socket", lambda: engine.scheduler.cancels_pending() == 1)
        engine.step()
        assert engine.busy_counts() == (0, 0)
        assert engine.scheduler.counters["cancelled"] == 1
        assert engine.memory.allocator.available_size() == idle
        engine.resume()


def test_cancel_returns_while_a_step_holds_the_engine(engine: Engine) -> None:
    """The server cancels on its event loop: `Engine.cancel` never waits for the lock a running step holds.

    (The loop takes that lock again step after step, so a waiting cancel stalled every
    connection of the server until the engine ran out of work.)
    """
    engine.pause()
    req = engine.submit("held by a step", max_new_tokens=50, ignore_eos=True)
    returned = threading.Event()
    with engine._lock:  # what a step in flight holds
        worker = threading.Thread(target=lambda: (engine.cancel([req]), returned.set()))
        worker.start()
        assert returned.wait(DEADLINE_S), "cancel waited for the engine lock"
    worker.join(DEADLINE_S)
    assert engine.scheduler.cancels_pending() == 1
    engine.step()
    assert engine.busy_counts() == (0, 0) and engine.scheduler.counters["cancelled"] == 1
    engine.resume()


# -- connection hygiene -----------------------------------------------------------------------


def test_a_half_sent_request_is_closed_after_the_header_timeout(engine: Engine) -> None:
    """A request line without its headers gets 408 and a closed socket once header_timeout_s passed."""
    with live_server(create_app(EngineBackend(engine))) as (host, port):
        sock = socket.create_connection((host, port), timeout=DEADLINE_S)
        sock.sendall(b"POST /generate HTTP/1.1\r\nhost: x\r\n")
        answer = b""
        while chunk := sock.recv(65536):  # returns b"" once the server closed the connection
            answer += chunk
        sock.close()
        assert answer.startswith(b"HTTP/1.1 408 ")
        assert httpx.get(f"http://{host}:{port}/health", timeout=DEADLINE_S).status_code == 200


@pytest.mark.parametrize("path", [b"/generate", b"/v1/completions"])
def test_a_body_that_never_comes_is_408_and_closes_the_connection(engine: Engine, path: bytes) -> None:
    """Headers promising a body that does not arrive within body_timeout_s get 408 naming the setting, with
    `Connection: close`, and the server closes the socket: on the /v1 routes (OpenAI's error body) too."""
    engine.override_config("test", body_timeout_s=0.2)
    with live_server(create_app(EngineBackend(engine))) as (host, port):
        sock = socket.create_connection((host, port), timeout=DEADLINE_S)
        sock.sendall(
            b"POST " + path + b" HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"
        )
        answer = b""
        while chunk := sock.recv(65536):  # returns b"" once the server closed the connection
            answer += chunk
        sock.close()
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408 ")
        assert b"connection: close" in head.lower()
        assert b"'body_timeout_s' (0.2 s; 1 bytes came)" in body


def test_connections_past_the_cap_get_503() -> None:
    """With max_connections 2 held by idle sockets, a third client's request is answered 503, not queued forever."""
    eng = Engine.from_args(["--max-total-tokens", "512", "--max-connections", "2"])
    try:
        with live_server(create_app(EngineBackend(eng))) as (host, port):
            idle = [socket.create_connection((host, port), timeout=DEADLINE_S) for _ in range(2)]
            try:
                wait_until("the cap to refuse a third connection", lambda: _health(host, port) == 503)
            finally:
                for sock in idle:
                    sock.close()
            wait_until("the cap to admit again", lambda: _health(host, port) == 200)
    finally:
        eng.shutdown()


def _health(host: str, port: int) -> int:
    return httpx.get(f"http://{host}:{port}/health", timeout=DEADLINE_S).status_code


@pytest.mark.parametrize("path", ["/generate", "/v1/completions"])
def test_a_body_refused_for_its_size_closes_the_connection(engine: Engine, path: str) -> None:
    """413 from the declared length: the unread body would be taken for the next request, so the answer closes
    the connection; the client gets that one answer and then the end of the stream, never a second, unasked one."""
    with live_server(create_app(EngineBackend(engine))) as (host, port):
        sock = socket.create_connection((host, port), timeout=DEADLINE_S)
        head = f"POST {path} HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\n"
        sock.sendall(head.encode() + b"content-length: 1000000000000\r\n\r\n" + b'{"text": "')
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        sock.close()
    assert received.startswith(b"HTTP/1.1 413 ") and received.count(b"HTTP/1.1 ") == 1
    assert b"connection: close" in received.lower()
