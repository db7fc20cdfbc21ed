"""Requests whose replica exits: retried on a healthy one unless a stream already sent pieces.

The replicas here are the controller's real handles on pipes whose other end the test
plays, so every message arrives exactly when the test sends it; a replica "dies" when
its end of the pipe closes, as it does when the process is killed. A real SIGKILL of a
replica process is in test_dp_failover.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Iterator
from typing import Any

import pytest

from engine.dp.handle import Replica
from engine.dp.messages import (
    Ask,
    Cancel,
    Chunk,
    Failed,
    FailureKind,
    Generate,
    GenerateUnit,
    Ready,
    Result,
    asks,
)
from engine.dp.routing import RequestRouter
from engine.errors import ReplicaLost, RequestRejected
from engine.request_params import SamplingParams


class FakeProcess:
    exitcode: int | None = None

    def __init__(self) -> None:
        self.dead = False

    def is_alive(self) -> bool:
        return not self.dead

    def join(self, timeout: float | None = None) -> None:
        pass


class Played:
    """One replica handle and the test's end of its pipe."""

    def __init__(self, index: int) -> None:
        self.ours, self.theirs = multiprocessing.Pipe()
        self.process = FakeProcess()
        self.replica = Replica(index, self.process, self.ours)
        self.theirs.send(Ready(index + 1, 1000 + index))
        self.replica.wait_ready(5.0)

    def request(self) -> Generate:
        assert self.theirs.poll(10), "no request reached the replica"
        message = self.theirs.recv()
        assert isinstance(message, Generate)
        return message

    def unit(self) -> GenerateUnit:
        assert self.theirs.poll(10), "no unit reached the replica"
        message = self.theirs.recv()
        assert isinstance(message, GenerateUnit)
        return message

    def die(self) -> None:
        self.process.dead, self.process.exitcode = True, -9
        self.theirs.close()


@pytest.fixture
def played(server_args) -> Iterator[list[Played]]:
    replicas = [Played(0), Played(1)]
    yield replicas
    for p in replicas:
        if not p.theirs.closed:
            p.theirs.close()


def _run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_a_request_on_a_replica_that_dies_is_answered_by_another(played: list[Played]) -> None:
    """Replica 0 takes the request and dies: replica 1 gets the same arguments and its answer is returned."""
    router = RequestRouter([p.replica for p in played])

    async def scenario() -> dict[str, Any]:
        task = asyncio.ensure_future(router.generate({"prompt_or_ids": "x", "max_new_tokens": 2}))
        first = await asyncio.to_thread(played[0].request)
        played[0].die()
        second = await asyncio.to_thread(played[1].request)
        assert second.ask == first.ask and second.rid != first.rid and not second.stream
        assert first.ask == Ask("x", SamplingParams(max_new_tokens=2))  # the request model's, typed
        played[1].theirs.send(Result(second.rid, {"text": "ok", "meta_info": {"dp_rank": 1}}))
        return await task

    assert _run(scenario()) == {"text": "ok", "meta_info": {"dp_rank": 1}}


def test_a_refused_request_is_not_retried(played: list[Played]) -> None:
    """A replica's own refusal is the answer: raised as its exception, never sent to another replica."""
    router = RequestRouter([p.replica for p in played])

    async def scenario() -> None:
        task = asyncio.ensure_future(router.generate({"prompt_or_ids": "x", "max_new_tokens": 2}))
        message = await asyncio.to_thread(played[0].request)
        played[0].theirs.send(Failed(message.rid, FailureKind.REJECTED, "too long for the context"))
        with pytest.raises(RequestRejected, match="too long for the context"):
            await task

    _run(scenario())
    assert not played[1].theirs.poll(0.2)


def test_a_stream_is_incremental_and_retried_while_nothing_was_sent(played: list[Played]) -> None:
    """No piece sent before replica 0 died: replica 1 streams it; each piece reaches the caller as it comes."""
    router = RequestRouter([p.replica for p in played])

    async def scenario() -> list[dict[str, Any]]:
        stream = router.stream({"prompt_or_ids": "x", "max_new_tokens": 2})
        first = asyncio.ensure_future(stream.__anext__())
        message = await asyncio.to_thread(played[0].request)
        assert message.stream
        played[0].die()
        retry = await asyncio.to_thread(played[1].request)
        played[1].theirs.send(Chunk(retry.rid, "a", (1,)))
        got = [await first]  # the first piece arrives before the replica sent anything else
        played[1].theirs.send(Chunk(retry.rid, "b", (2,)))
        got.append(await stream.__anext__())
        played[1].theirs.send(Result(retry.rid, {"text": "ab", "output_ids": [1, 2]}))
        got += [piece async for piece in stream]
        return got

    assert _run(scenario()) == [
        {"text": "a", "token_ids": [1]},
        {"text": "b", "token_ids": [2]},
        {"text": "ab", "output_ids": [1, 2]},
    ]


def test_a_stream_that_sent_pieces_ends_with_the_replicas_failure(played: list[Played]) -> None:
    """Once a piece reached the caller, the replica's death ends the stream with ReplicaLost; nothing is resent."""
    router = RequestRouter([p.replica for p in played])

    async def scenario() -> None:
        stream = router.stream({"prompt_or_ids": "x", "max_new_tokens": 4})
        first = asyncio.ensure_future(stream.__anext__())
        message = await asyncio.to_thread(played[0].request)
        played[0].theirs.send(Chunk(message.rid, "a", (1,)))
        assert await first == {"text": "a", "token_ids": [1]}
        played[0].die()
        with pytest.raises(ReplicaLost, match=r"^replica 0 exited after streaming 1 piece\(s\) -- the answer is"):
            await stream.__anext__()

    _run(scenario())
    assert not played[1].theirs.poll(0.2)


def test_over_http_the_stream_ends_with_an_error_event_after_pieces(played: list[Played]) -> None:
    """/generate streaming from a group whose replica dies mid-stream: the pieces, an error event (503), [DONE]."""
    import json

    from fastapi.testclient import TestClient

    from engine.dp.group_backend import ReplicaGroupBackend
    from engine.http.app import create_app

    class Controller:
        dp_size = 2
        vocab_size = 256

        def __init__(self) -> None:
            self.router = RequestRouter([p.replica for p in played])

        def stream(self, args: dict[str, Any]) -> Any:
            return self.router.stream(args)

    import threading

    def first_piece() -> None:
        # the route starts the stream before it answers (a refusal is then a status), so the
        # replica's first piece must arrive while the client waits for the response
        message = played[0].request()
        played[0].theirs.send(Chunk(message.rid, "a", (97,)))

    feeder = threading.Thread(target=first_piece, daemon=True)
    feeder.start()
    client = TestClient(create_app(ReplicaGroupBackend(Controller())))  # type: ignore[arg-type]
    with client.stream("POST", "/generate", json={"text": "x", "max_new_tokens": 4, "stream": True}) as r:
        assert r.status_code == 200
        feeder.join(timeout=60)
        assert not feeder.is_alive()
        lines = (line[len("data: ") :] for line in r.iter_lines() if line.startswith("data: "))
        assert json.loads(next(lines)) == {"text": "a", "delta": "a", "output_ids": [97]}
        played[0].die()
        rest = list(lines)
    assert rest[-1] == "[DONE]"
    error = json.loads(rest[0])
    assert error["status"] == 503
    assert error["error"]["detail"] == (
        "replica 0 exited after streaming 1 piece(s) -- the answer is incomplete; send the request again"
    )
    assert len(rest) == 2


def _next_message(p: Played) -> Any:
    assert p.theirs.poll(10), "nothing reached the replica"
    return p.theirs.recv()


def test_a_request_whose_client_went_away_is_cancelled_on_its_replica(played: list[Played]) -> None:
    """The awaiting task is cancelled (the client disconnected): the replica is told to free that request."""
    router = RequestRouter([p.replica for p in played])

    async def scenario() -> None:
        task = asyncio.ensure_future(router.generate({"prompt_or_ids": "x", "max_new_tokens": 2}))
        sent = await asyncio.to_thread(played[0].request)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        cancel = await asyncio.to_thread(_next_message, played[0])
        assert cancel == Cancel(sent.rid)

    _run(scenario())
    assert played[0].replica.pending == {}


def test_a_stream_the_client_stopped_reading_is_cancelled_on_its_replica(played: list[Played]) -> None:
    """A consumer that leaves after the first piece: the replica gets `Cancel` for that request."""
    router = RequestRouter([p.replica for p in played])

    async def scenario() -> None:
        stream = router.stream({"prompt_or_ids": "x", "max_new_tokens": 8})
        first = asyncio.ensure_future(stream.__anext__())
        sent = await asyncio.to_thread(played[0].request)
        played[0].theirs.send(Chunk(sent.rid, "a", (97,)))
        assert (await first)["text"] == "a"
        await stream.aclose()
        cancel = await asyncio.to_thread(_next_message, played[0])
        assert cancel == Cancel(sent.rid)

    _run(scenario())


class FakeEngine:
    """Records what the replica's request handling asks of an engine."""

    def __init__(self) -> None:
        self.cancelled: list[Any] = []
        self.submitted: list[Any] = []

    def submit(self, prompt: Any, **params: Any) -> Any:
        self.submitted.append((prompt, params))
        return ("req", len(self.submitted))

    def cancel(self, reqs: list[Any]) -> None:
        self.cancelled.extend(reqs)


def test_a_cancel_reaches_the_engine_whether_it_comes_before_or_after_the_request_is_queued() -> None:
    from engine.dp.replica import Running, _cancel

    engine, running = FakeEngine(), Running()
    req = engine.submit("x")
    assert running.add(7, [req])
    _cancel(engine, 7, running)  # after: cancelled at once
    assert engine.cancelled == [req]
    _cancel(engine, 8, running)  # before: nothing to cancel yet ...
    assert engine.cancelled == [req]
    assert not running.add(8, [engine.submit("y")])  # ... so the request is refused when it is queued


def test_a_unit_of_work_goes_whole_to_one_replica_and_is_retried_whole(played: list[Played]) -> None:
    """A batch is one message to one replica, answered once with each item in order; when that replica dies
    the whole unit goes to the other; a client that leaves cancels the unit with one `Cancel`."""
    router = RequestRouter([p.replica for p in played])
    argss = [{"prompt_or_ids": f"p{i}", "max_new_tokens": 1} for i in range(3)]

    async def scenario() -> list[dict[str, Any]]:
        task = asyncio.ensure_future(router.generate_many(argss))
        first = await asyncio.to_thread(played[0].unit)
        assert first.items == tuple(Ask(f"p{i}", SamplingParams(max_new_tokens=1)) for i in range(3))
        assert not played[1].theirs.poll(0.1)  # nothing of the unit went to the other replica
        played[0].die()
        second = await asyncio.to_thread(played[1].unit)
        assert second.items == first.items and second.rid != first.rid
        played[1].theirs.send(Result(second.rid, {"items": [{"text": t} for t in "abc"]}))
        answer = await task
        gone = asyncio.ensure_future(router.generate_many(argss))
        sent = await asyncio.to_thread(played[1].unit)
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert await asyncio.to_thread(_next_message, played[1]) == Cancel(sent.rid)
        return answer

    assert _run(scenario()) == [{"text": "a"}, {"text": "b"}, {"text": "c"}]


def test_a_one_item_unit_is_a_plain_request(played: list[Played]) -> None:
    router = RequestRouter([p.replica for p in played])

    async def scenario() -> list[dict[str, Any]]:
        task = asyncio.ensure_future(router.generate_many([{"prompt_or_ids": "x", "max_new_tokens": 1}]))
        sent = await asyncio.to_thread(played[0].request)
        played[0].theirs.send(Result(sent.rid, {"text": "ok"}))
        return await task

    assert _run(scenario()) == [{"text": "ok"}]


class UnitEngine(FakeEngine):
    """An engine whose batch submit hands back one request per item and whose wait answers each at once."""

    def submit_batch(self, items: list[Any], *, timeout_s: Any = None, add_special_tokens: bool = True) -> list[Any]:
        self.submitted.append((items, timeout_s, add_special_tokens))
        return [("req", prompt) for prompt, _ in items]

    def wait(self, req: Any) -> Any:
        raise NotImplementedError  # replaced per test

    def wait_all(self, reqs: list[Any]) -> list[Any]:
        return [self.wait(req) for req in reqs]


def test_a_replica_runs_a_unit_as_one_batch_and_answers_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The replica submits the unit with one `submit_batch`, answers every item's body in order, and a
    `Cancel` of the unit's id reaches all of its requests."""
    import engine.http.bodies as bodies
    from engine.dp import replica

    monkeypatch.setattr(bodies, "generate_body", lambda result, dp_rank=None: {"text": result, "dp_rank": dp_rank})
    engine, running, sent = UnitEngine(), replica.Running(), []
    engine.wait = lambda req: req[1].upper()  # type: ignore[method-assign]

    class Sender:
        def send(self, message: Any) -> None:
            sent.append(message)

    items = ({"prompt_or_ids": "a", "max_new_tokens": 1, "timeout_s": 5}, {"prompt_or_ids": "b", "max_new_tokens": 1})
    replica._generate_unit(engine, 2, GenerateUnit(4, asks(items)), Sender(), running)  # type: ignore[arg-type]
    assert sent == [Result(4, {"items": [{"text": "A", "dp_rank": 1}, {"text": "B", "dp_rank": 1}]})]
    ((submitted, timeout_s, special),) = engine.submitted
    assert [p for p, _ in submitted] == ["a", "b"] and timeout_s == 5 and special is True
    assert running.add(9, [("req", "x"), ("req", "y")])
    replica._cancel(engine, 9, running)
    assert engine.cancelled == [("req", "x"), ("req", "y")]
