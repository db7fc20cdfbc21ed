"""The scheduler on its own: admission, chunked prefill, retraction, counts, stepped by hand."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import attrs
import pytest

from engine.engine import Engine
from engine.model import reference_generate
from engine.scheduler import Req, Scheduler

MakeScheduler = Callable[..., tuple[Engine, Scheduler]]


@pytest.fixture
def make_scheduler() -> Iterator[MakeScheduler]:
    """A paused engine's runner and pools under a fresh scheduler with the given limits; no prefix cache."""
    engines: list[Engine] = []

    def make(*argv: str, **limits: int) -> tuple[Engine, Scheduler]:
        engine = Engine.from_args(["--max-total-tokens", "256", "--disable-radix-cache", *argv])
        engine.pause()  # the engine's own loop never steps; only the scheduler under test touches the pools
        engines.append(engine)
        return engine, Scheduler(engine.runner, attrs.evolve(engine.scheduler.limits, **limits), prefix_cache=None)

    yield make
    for engine in engines:
        engine.shutdown()


def submit(sched: Scheduler, prompt_len: int, max_new_tokens: int = 4) -> Req:
    req = sched.new_request(
        [(i * 5) % 250 + 1 for i in range(prompt_len)],
        max_new_tokens=max_new_tokens,
        temperature=0.0,
        seed=0,
        ignore_eos=True,
    )
    sched.submit(req)
    return req


def run_to_end(sched: Scheduler, steps: int = 500) -> None:
    for _ in range(steps):
        if not sched.has_work():
            return
        sched.step()
    raise AssertionError(f"the scheduler still has work after {steps} steps")


def test_admission_stops_at_max_running_requests(make_scheduler: MakeScheduler) -> None:
    """Three requests under max_running_requests 2: two run, one waits until a row is given back."""
    engine, sched = make_scheduler(max_running_requests=2)
    reqs = [submit(sched, 6, max_new_tokens=3) for _ in range(3)]
    assert sched.counts() == (3, 0)
    sched.step()
    assert sched.counts() == (1, 2)
    assert [r.row is not None for r in reqs] == [True, True, False]
    run_to_end(sched)
    assert sched.counts() == (0, 0)
    assert all(r.finish_reason == "length" and len(r.output) == 3 for r in reqs)
    assert engine.memory.req_to_token_pool.available_size() == sched.req_pool.size


def test_admission_stops_when_request_rows_run_out(make_scheduler: MakeScheduler) -> None:
    """With one free request row, one request is admitted and the other waits for it."""
    engine, sched = make_scheduler()
    pool = engine.memory.req_to_token_pool
    held = pool.alloc(pool.available_size() - 1)
    assert held is not None
    first, second = submit(sched, 6), submit(sched, 6)
    sched.step()
    assert sched.counts() == (1, 1) and first.row is not None and second.row is None
    run_to_end(sched)
    assert first.finish_reason == second.finish_reason == "length"
    pool.free(held)


def test_chunked_prefill_takes_at_most_the_chunk_size_per_step(make_scheduler: MakeScheduler) -> None:
    """A 40-token prompt under chunked_prefill_size 16 is prefilled 16, 16, 7; two prompts share one step's budget."""
    _, sched = make_scheduler(chunked_prefill_size=16)
    long = submit(sched, 40)
    seen = []
    while not long.output:
        sched.step()
        seen.append(long.kv_len)
    assert seen == [16, 32, 40]  # the third step prefills the last 7 and decodes the first token
    assert sched.counters["prefill_batches"] == 3 and sched.counters["prefill_tokens"] == 39
    run_to_end(sched)
    a, b = submit(sched, 10), submit(sched, 20)
    sched.step()
    # a's 9 prefill tokens and b's 7 fill the 16; a decodes in the same step, b still prefills
    assert (a.kv_len, len(a.output), b.kv_len, len(b.output)) == (10, 1, 7, 0)
    sched.step()
    # b's last 12 prefill tokens and a's next token are one forward; b's first token comes next step
    assert (b.kv_len, len(b.output), len(a.output)) == (19, 0, 2)
    assert sched.counters["mixed_batches"] == 1
    sched.step()
    assert (b.kv_len, len(b.output)) == (20, 1)


def test_without_mixing_a_completed_prefill_decodes_in_its_own_step(make_scheduler: MakeScheduler) -> None:
    """enable_mixed_chunk off: a prefill forward, then a decode forward that already takes the new request."""
    _, sched = make_scheduler("--no-enable-mixed-chunk", chunked_prefill_size=16)
    a, b = submit(sched, 10), submit(sched, 20)
    sched.step()
    sched.step()
    assert (b.kv_len, len(b.output), len(a.output)) == (20, 1, 2)
    assert sched.counters["mixed_batches"] == 0 and sched.counters["decode_batches"] == 2


def test_mixed_steps_give_the_tokens_of_separate_forwards(make_scheduler: MakeScheduler) -> None:
    """Greedy and seeded requests arriving while others decode: the same tokens with and without mixing."""
    outputs = []
    for mixed in (True, False):
        _, sched = make_scheduler(
            "--enable-mixed-chunk" if mixed else "--no-enable-mixed-chunk", chunked_prefill_size=8
        )
        reqs = []
        for i in range(6):
            req = sched.new_request(
                [(j * 7 + i) % 250 + 1 for j in range(5 + 3 * i)],
                max_new_tokens=6 + i,
                temperature=0.8 if i % 2 else 0.0,
                seed=7 + i,
                ignore_eos=True,
            )
            sched.submit(req)
            reqs.append(req)
            sched.step()
        run_to_end(sched)
        assert (sched.counters["mixed_batches"] > 0) is mixed
        outputs.append([list(r.output) for r in reqs])
    assert outputs[0] == outputs[1]


def test_newest_request_is_retracted_when_the_pool_runs_out(make_scheduler: MakeScheduler) -> None:
    """Two decodes that outgrow the pool: the newer is retracted, requeued first, and both finish exactly."""
    engine, sched = make_scheduler("--max-total-tokens", "64", "--schedule-conservativeness", "0")
    free = engine.memory.allocator.available_size()
    older, newer = submit(sched, 20, max_new_tokens=30), submit(sched, 20, max_new_tokens=30)
    while not sched.counters["retractions"]:
        sched.step()
    assert sched.counts() == (1, 1)
    assert list(sched.waiting) == [newer] and newer.row is None and newer.kv_len == 0
    assert newer.retractions == 1 and older.retractions == 0
    run_to_end(sched)
    assert older.retractions == 0 and newer.retractions == sched.counters["retractions"]
    for req in (older, newer):
        assert req.output == reference_generate(engine.model, req.prompt, 30, ignore_eos=True)
    assert engine.memory.allocator.available_size() == free


def test_a_prompt_too_big_for_one_chunk_waits_for_running_decodes(make_scheduler: MakeScheduler) -> None:
    """A long prompt that fits only in smaller chunks starts once the pool is its own; the decode it waits for finishes."""
    # planned as with a radix cache (the scheduler under test has none): without one the plan
    # would size the SWA pool to hold a whole chunk
    engine, sched = make_scheduler("--max-total-tokens", "64", "--no-disable-radix-cache")
    short = submit(sched, 10, max_new_tokens=30)
    sched.step()
    long = submit(sched, 60, max_new_tokens=2)
    while short.finish_reason is None:
        sched.step()
        assert long.kv_len == 0  # no partial prompt holds slots the decode needs
    run_to_end(sched)
    assert short.error is None and long.error is None
    assert short.output == reference_generate(engine.model, short.prompt, 30, ignore_eos=True)
    assert long.output == reference_generate(engine.model, long.prompt, 2, ignore_eos=True)
    assert sched.counters["prefill_batches"] == 3  # the short prompt, then the long one in two chunks


def submit_unit(sched: Scheduler, items: int, max_new_tokens: int = 2) -> list[Req]:
    """One unit of work (a batch) of `items` short prompts."""
    reqs = [
        sched.new_request([i + 1, 7], max_new_tokens=max_new_tokens, temperature=0.0, seed=0, ignore_eos=True)
        for i in range(items)
    ]
    sched.submit_all(reqs)
    return reqs


def running_by_unit(sched: Scheduler) -> dict[int, int]:
    held: dict[int, int] = {}
    for req in [*sched.prefilling, *sched.decoding]:
        held[req.group] = held.get(req.group, 0) + 1
    return held


def test_a_batch_beside_a_short_request_holds_fair_unit_rows(make_scheduler: MakeScheduler) -> None:
    """With a short request in the engine, a 40-item batch holds 4 rows, so the short one's steps stay small;
    once it is gone (and without a hold after it) the batch fills every row again."""
    _, sched = make_scheduler("--fair-unit-rows", "4", "--fair-hold-steps", "0", max_running_requests=16)
    batch = submit_unit(sched, 40, max_new_tokens=3)
    short = submit(sched, 6, max_new_tokens=3)
    sizes = []
    while short.finish_reason is None:
        before = sched.counters["decode_tokens"]
        sched.step()
        sizes.append(sched.counters["decode_tokens"] - before)
        assert running_by_unit(sched).get(batch[0].group, 0) <= 4
    assert sizes == [5, 5, 5]  # each of the short request's three decodes beside 4 batch items
    assert sched.counters["bulk_passed"] > 0
    sched.step()
    assert running_by_unit(sched) == {batch[0].group: 16}  # alone, the batch uses every row
    run_to_end(sched)
    assert all(r.finish_reason == "length" and len(r.output) == 3 for r in [*batch, short])


def test_a_batch_stays_held_for_fair_hold_steps_after_a_short_request_leaves(make_scheduler: MakeScheduler) -> None:
    """A client sending short requests one after another is away a step or two between them: the batch stays
    held that long, so the next short request does not wait behind a step the batch filled; then it fills again."""
    _, sched = make_scheduler("--fair-unit-rows", "2", "--fair-hold-steps", "2", max_running_requests=16)
    batch = submit_unit(sched, 200, max_new_tokens=1)
    unit = batch[0].group
    for _ in range(3):  # three short requests, each sent two steps after the one before finished
        short = submit(sched, 6, max_new_tokens=1)
        sched.step()
        assert short.finish_reason == "length" and running_by_unit(sched).get(unit, 0) == 0
        admitted = sched.counters["admitted"]
        sched.step()
        sched.step()
        assert sched.counters["admitted"] - admitted == 4  # the two steps of its gap: 2 rows each
    admitted = sched.counters["admitted"]
    sched.step()  # a third step without a short request: the hold is over
    assert sched.counters["admitted"] - admitted == 16
    run_to_end(sched)
    assert all(r.finish_reason == "length" for r in batch)


def test_a_batch_arriving_at_an_idle_engine_is_not_held_for_an_earlier_short_request(
    make_scheduler: MakeScheduler,
) -> None:
    """The hold bridges a client's gap while the engine is busy; once the engine emptied, nobody is in a gap."""
    _, sched = make_scheduler("--fair-unit-rows", "2", "--fair-hold-steps", "2", max_running_requests=16)
    short = submit(sched, 6, max_new_tokens=1)
    run_to_end(sched)
    assert short.finish_reason == "length"
    submit_unit(sched, 40, max_new_tokens=1)
    admitted = sched.counters["admitted"]
    sched.step()
    assert sched.counters["admitted"] - admitted == 16
    run_to_end(sched)


def test_fair_hold_steps_zero_holds_only_while_the_short_request_is_in(make_scheduler: MakeScheduler) -> None:
    _, sched = make_scheduler("--fair-unit-rows", "2", "--fair-hold-steps", "0", max_running_requests=16)
    batch = submit_unit(sched, 100, max_new_tokens=1)
    short = submit(sched, 6, max_new_tokens=1)
    admitted = sched.counters["admitted"]
    sched.step()
    assert short.finish_reason == "length" and sched.counters["admitted"] - admitted == 3
    admitted = sched.counters["admitted"]
    sched.step()
    assert sched.counters["admitted"] - admitted == 16
    run_to_end(sched)
    assert all(r.finish_reason == "length" for r in batch)


def test_large_units_among_themselves_share_every_row(make_scheduler: MakeScheduler) -> None:
    """Two batches larger than fair_unit_rows take turns for all 16 rows: the limit is for small units' sake."""
    _, sched = make_scheduler("--fair-unit-rows", "4", max_running_requests=16)
    first, second = submit_unit(sched, 20), submit_unit(sched, 20)
    sched.step()
    assert running_by_unit(sched) == {first[0].group: 8, second[0].group: 8}
    assert sched.counters["bulk_passed"] == 0
    run_to_end(sched)


def test_a_unit_at_the_limit_is_small(make_scheduler: MakeScheduler) -> None:
    """A batch of exactly fair_unit_rows items is a small unit: beside it a larger one is held, it is not."""
    _, sched = make_scheduler("--fair-unit-rows", "4", max_running_requests=16)
    large, small = submit_unit(sched, 20), submit_unit(sched, 4)
    sched.step()
    assert running_by_unit(sched) == {large[0].group: 4, small[0].group: 4}
    run_to_end(sched)


def test_fair_unit_rows_zero_lets_a_batch_take_every_row(make_scheduler: MakeScheduler) -> None:
    """Turned off, the batch and the short request take turns for all the rows, as before the limit existed."""
    _, sched = make_scheduler("--fair-unit-rows", "0", max_running_requests=16)
    batch = submit_unit(sched, 40)
    short = submit(sched, 6)
    sched.step()
    assert running_by_unit(sched) == {batch[0].group: 15, short.group: 1}
    run_to_end(sched)


def test_fair_unit_rows_is_read_at_each_step(make_scheduler: MakeScheduler) -> None:
    """An override of the hot setting changes the very next admission."""
    engine, sched = make_scheduler("--fair-unit-rows", "2", "--schedule-conservativeness", "0", max_running_requests=16)
    batch = submit_unit(sched, 40, max_new_tokens=30)
    short = submit(sched, 6, max_new_tokens=30)
    sched.step()
    assert running_by_unit(sched) == {batch[0].group: 2, short.group: 1}
    engine.context.override("ops", fair_unit_rows=0)
    sched.step()
    assert running_by_unit(sched) == {batch[0].group: 15, short.group: 1}
    run_to_end(sched)
