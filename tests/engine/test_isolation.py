"""One request failing inside the engine fails alone; a request past its deadline fails alone; the batch goes on."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from engine.engine import Engine
from engine.errors import DeadlineExceeded, GenerationError, OwnDeadlineExceeded, RequestRejected
from sgconf.twin import replaced


class FakeClock:
    """A clock the test moves by hand, so deadlines never depend on how fast the machine is."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def engine() -> Iterator[tuple[Engine, FakeClock]]:
    clock = FakeClock()
    eng = Engine.from_args(["--max-total-tokens", "1024", "--request-timeout-s", "60"])
    eng.shutdown(unpublish=False)  # stop its loop; rebuild with the fake clock on the same record
    eng = Engine(eng.context.record, clock=clock)
    eng.pause()
    try:
        yield eng, clock
    finally:
        eng.shutdown()


def run_until_done(engine: Engine, reqs: list) -> None:
    for _ in range(500):
        if all(r.done.is_set() for r in reqs):
            return
        engine.step()
    raise AssertionError("requests did not finish in 500 steps")


def test_a_request_whose_sampling_fails_fails_alone(engine) -> None:
    """A NaN temperature that reached the scheduler fails that request; the others finish with their own outputs."""
    eng, _ = engine
    alone = eng.submit("steady", max_new_tokens=6, ignore_eos=True)
    run_until_done(eng, [alone])
    expected = eng.wait(alone).token_ids
    free_before = eng.memory.allocator.available_size()

    good = [eng.submit("steady", max_new_tokens=6, ignore_eos=True) for _ in range(2)]
    bad = eng.scheduler.new_request(eng.tokenizer.encode("poison"), max_new_tokens=6, temperature=0.5, seed=1)
    # the model refuses NaN at every construction; poison the request past its checks, as a bug inside would
    bad.temperature = math.nan
    bad.params = replaced(bad.params, {"temperature": math.nan})
    eng.scheduler.submit(bad)
    run_until_done(eng, [*good, bad])
    assert [eng.wait(r).token_ids for r in good] == [expected, expected]
    with pytest.raises(GenerationError, match=r"^sampling failed for this request -- check its temperature"):
        eng.wait(bad)
    assert eng.busy_counts() == (0, 0)
    assert eng.scheduler.counters["failed"] == 1
    # its KV went back (the good ones repeat a cached sequence, so they keep nothing new)
    assert eng.memory.allocator.available_size() == free_before


def test_submit_refuses_a_non_finite_temperature() -> None:
    """The engine's own API refuses NaN and infinite temperatures before they are queued."""
    with Engine.from_args(["--max-total-tokens", "256"]) as eng:
        for t in (math.nan, math.inf):
            with pytest.raises(RequestRejected, match=r"\$\.temperature: expected a finite number"):
                eng.submit("x", max_new_tokens=2, temperature=t)


def test_a_request_past_its_deadline_fails_alone(engine) -> None:
    """A request with a short timeout_s fails with DeadlineExceeded once the clock passes it; the other finishes."""
    eng, clock = engine
    slow = eng.submit("late one", max_new_tokens=50, ignore_eos=True, timeout_s=5)
    fine = eng.submit("on time", max_new_tokens=8, ignore_eos=True)
    for _ in range(3):
        eng.step()
    clock.now += 5
    run_until_done(eng, [slow, fine])
    with pytest.raises(
        OwnDeadlineExceeded, match=r"passed its deadline of 5 s before it finished \(\d+ of 50 tokens\)"
    ):
        eng.wait(slow)  # the client chose 5 s: its own budget ran out (408 over HTTP)
    assert len(eng.wait(fine).token_ids) == 8
    assert eng.scheduler.counters["timed_out"] == 1


def test_the_default_deadline_is_request_timeout_s(engine) -> None:
    """Without timeout_s a request gets request_timeout_s; a waiting request past it fails even on a paused engine."""
    eng, clock = engine
    req = eng.submit("queued", max_new_tokens=4)
    assert req.deadline == clock.now + 60
    clock.now += 61
    with pytest.raises(DeadlineExceeded) as info:
        eng.wait(req, timeout=30)  # no step runs: wait itself notices the deadline
    assert not isinstance(info.value, OwnDeadlineExceeded)  # the server's deadline: a 504, not the client's 408
    assert eng.busy_counts() == (0, 0)


def test_timeout_s_above_the_server_deadline_is_refused(engine) -> None:
    """A request may shorten its deadline, never lengthen it past request_timeout_s."""
    eng, _ = engine
    with pytest.raises(RequestRejected, match=r"\$\.timeout_s: must be at most 'request_timeout_s' \(60\) \(got 61"):
        eng.submit("x", max_new_tokens=2, timeout_s=61)


def test_a_failed_step_fails_only_the_running_requests(monkeypatch) -> None:
    """A bug in one step fails the requests it ran; a request still queued (no room yet) runs afterwards."""
    with Engine.from_args(["--max-total-tokens", "1024", "--max-running-requests", "1"]) as eng:
        eng.pause()
        first = eng.submit("running", max_new_tokens=4, ignore_eos=True)
        queued = eng.submit("queued", max_new_tokens=4, ignore_eos=True)
        calls = {"n": 0}
        real = eng.scheduler._decode

        def broken() -> None:
            calls["n"] += 1
            if calls["n"] == 1:
                raise RuntimeError("kernel fault")
            real()

        monkeypatch.setattr(eng.scheduler, "_decode", broken)
        eng.resume()  # the loop thread handles the failure the way it does in production
        with pytest.raises(GenerationError, match="internal error in the engine step"):
            eng.wait(first, timeout=120)
        assert len(eng.wait(queued, timeout=120).token_ids) == 4


def test_a_deadline_the_client_chose_is_not_a_server_error() -> None:
    """Past its own timeout_s a request is answered 408 naming it; past the server's request_timeout_s, 504."""
    from engine.http.problems import problem_of

    own = problem_of(OwnDeadlineExceeded("request 5 passed its deadline of 0.1 s before it finished"))
    server = problem_of(DeadlineExceeded("request 6 passed its deadline of 600 s before it finished"))
    assert (own.status, server.status) == (408, 504)
    assert own.body()["detail"].startswith("request 5 passed its deadline of 0.1 s")
