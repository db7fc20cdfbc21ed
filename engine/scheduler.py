"""The scheduler: requests queue, prefill in chunks, decode in one continuous batch.

Each `step()` reads its settings from one config snapshot taken when it starts, so an
override never lands inside a step (the engine applies overrides between steps), and
does, in order:
1. admit waiting requests, in the order `schedule_policy` gives (`engine.policy`),
   while request rows, `max_running_requests` and the memory reserve of
   `schedule_conservativeness` allow (unless a drain paused admission), taking turns
   between units of work and holding a large unit to `fair_unit_rows` rows while a
   small one is in the engine, or was within the last `fair_hold_steps` steps; each reuses
   the longest cached page prefix (prefix cache, then the HiCache tiers);
2. one extend batch of prefill chunks, at most `chunked_prefill_size` new tokens in all,
   so a long prompt never stalls running requests for more than one chunk; a request
   alone whose chunk does not fit the pool (the SWA side) takes a smaller one instead;
3. one decode step for every request whose prompt is in the cache (or one speculative
   draft-and-verify step when a draft worker is configured).

With `enable_mixed_chunk` (hot) steps 2 and 3 are one forward when both have rows: each
decode row is an extend of one token over its prefix, so the running requests pay one
forward per step however much prefill shares it; a request whose prompt completes in a
mixed step decodes from the next one.

A request's invariant between steps: KV is held for `kv_len` tokens; while decoding,
`kv_len == len(all_ids) - 1` (the newest token has no KV yet; the next step feeds it).
Prefill computes KV for the prompt minus its last token, so the first sampled token
comes out of a decode step like every other: one code path samples.

Sliding-window models: a token's SWA K/V is read only while it is inside the window of
some query still to come, so after every step each request releases the SWA slots of
its generated whole pages behind the window (`SWATokenToKVPoolAllocator.free_swa`);
the SWA pool then holds a prompt and about one window per request, not whole
sequences. Pages handed over from the prefix cache keep theirs (other requests may
extend from them), HiCache copies a page to host before its SWA slots go, and the
prefix cache records released pages so it never hands out a prefix whose window is gone.

When memory runs out the prefix cache is evicted first; if a decode step still does not
fit, the newest request is retracted (its KV freed, requeued to recompute), which keeps
outputs identical because decoding is a pure function of the tokens and the sampler's
generator.

The KV bookkeeping (allocation with eviction, SWA release, retraction) is
`engine.scheduler_memory`'s, admission `engine.scheduler_admission`'s; sampling and the
admission policies live in their own modules.
"""

from __future__ import annotations

import collections
import itertools
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import structlog
import torch

from attention.forward_batch import ForwardBatch
from engine.errors import RequestRejected
from engine.protocols import DraftWorker, HostCache, Runner
from engine.request_params import beyond_context
from engine.request_state import Req, SchedulerLimits
from engine.sampling import SamplingParams, plain_argmax_rows, sample
from engine.scheduler_admission import NEVER, SchedulerAdmission
from engine.scheduler_memory import SchedulerMemory
from mem_cache.prefix_cache import PrefixCache

log = structlog.get_logger(__name__)


def _live_snapshot() -> Any:
    from runtime.context import get_context

    return get_context().snapshot()


def swa_window(runner: Runner, speculative: DraftWorker | None = None) -> int | None:
    """The window to keep SWA K/V for, or None when the allocator never releases SWA slots.

    A draft worker shares the slot map, so the wider of the two models' windows counts.
    """
    if not hasattr(runner.token_to_kv_pool_allocator, "free_swa"):
        return None
    windows = [runner.model_shape.swa_window]
    if speculative is not None:
        windows.append(speculative.draft.model_shape.swa_window)
    known = [w for w in windows if w]
    return max(known) if known else None


class Scheduler(SchedulerAdmission, SchedulerMemory):
    """Owns the waiting queue, the running set and the KV bookkeeping of one model runner.

    `submit` is thread-safe; `step` must be called from one thread only (the engine loop).
    """

    def __init__(
        self,
        runner: Runner,
        limits: SchedulerLimits,
        *,
        prefix_cache: PrefixCache | None,
        speculative: DraftWorker | None = None,
        hicache: HostCache | None = None,
        settings: Callable[[], Any] | None = None,
        seed: int = 0,
        clock: Callable[[], float] = time.perf_counter,
        decode: Callable[[list[int]], str] | None = None,
    ) -> None:
        self.runner = runner
        self.clock = clock
        self.limits = limits
        self.cache = prefix_cache
        self.speculative = speculative
        self.hicache = hicache
        self.allocator = runner.token_to_kv_pool_allocator
        self.req_pool = runner.req_to_token_pool
        self.window = swa_window(runner, speculative)
        self._inbox: collections.deque[Req] = collections.deque()
        self._inbox_lock = threading.Lock()
        self.waiting: collections.deque[Req] = collections.deque()
        self.prefilling: list[Req] = []
        self.decoding: list[Req] = []
        self._ids = itertools.count(1)
        self.counters = collections.Counter[str]()
        self._settings = settings or _live_snapshot
        self.snap: Any = None  # the config snapshot of the step running now (or of the last one)
        self.rng = random.Random(seed)  # the `random` policy's draws
        self.admission_paused = 0  # drains waiting for the running requests to finish
        self.step_index = 0
        self.small_unit_seen = NEVER
        self.decode = decode  # the tokenizer's, to find stop strings in the output
        self._cancels: list[tuple[Req, str]] = []
        self._closed = False

    # -- submission ----------------------------------------------------------------------

    def new_request(
        self,
        prompt: Sequence[int],
        *,
        params: SamplingParams | None = None,
        seed: int = 0,
        timeout_s: float | None = None,
        own_deadline: bool = False,
        **fields: Any,
    ) -> Req:
        """Build a request; raises RequestRejected when it can never fit the KV pool, InvalidRequest the context.

        `params` were checked by the request model (`engine.request_params`) when they were
        built; `fields` replace some of them (`max_new_tokens=4, ignore_eos=True`) and are
        checked by the same model (an InvalidRequest naming the field). With `timeout_s`, the
        request fails alone (finish reason `timeout`) once that many seconds of the
        scheduler's clock have passed, wherever it is then; `own_deadline` says its client
        chose that deadline (the failure is then the client's `OwnDeadlineExceeded`).
        """
        params = attrs.evolve(params or SamplingParams(), **fields) if fields else (params or SamplingParams())
        max_new_tokens = params.max_new_tokens
        if not prompt:  # refused empty at every entry (`nonempty_prompt`): this is text that tokenized to none
            raise RequestRejected(
                "the prompt's text tokenizes to no tokens -- send text the tokenizer turns into tokens"
            )
        if params.stop and self.decode is None:
            raise RequestRejected("'stop' strings need a tokenizer to decode the output -- send stop_token_ids")
        headroom = self.speculative.tokens_per_step if self.speculative is not None else 1
        limit = self.limits.max_context_len - headroom
        if self.limits.context_length is not None:
            limit = min(limit, self.limits.context_length)
        if len(prompt) + max_new_tokens > limit:  # an InvalidRequest at $.max_new_tokens
            raise beyond_context(len(prompt), max_new_tokens, limit)
        # the first step holds KV for the prompt but its last token, plus one step's tokens
        page = self.limits.page_size
        need = -(-(len(prompt) - 1 + headroom) // page) * page
        if need > self.allocator.size:
            msg = (
                f"prompt of {len(prompt)} tokens needs {need} KV slots, more than 'max_total_tokens' "
                f"{self.allocator.size} holds -- shorten the prompt or raise --max-total-tokens"
            )
            raise RequestRejected(msg)
        gen = None
        if not params.greedy:
            gen = torch.Generator().manual_seed(int(seed))
        deadline = None if timeout_s is None else self.clock() + timeout_s
        rid = next(self._ids)
        return Req(
            rid,
            list(prompt),
            max_new_tokens,
            float(params.temperature),
            gen,
            params.ignore_eos,
            deadline=deadline,
            timeout_s=timeout_s,
            own_deadline=own_deadline,
            params=params,
            group=rid,
        )

    def submit(self, req: Req) -> bool:
        return self.submit_all([req])

    def submit_all(self, reqs: Sequence[Req]) -> bool:
        """Queue requests as one unit of work (they share the group of the first one); False once closed."""
        for req in reqs:
            req.group = reqs[0].rid
        with self._inbox_lock:
            if self._closed:
                return False
            self._inbox.extend(reqs)
        return True

    def close(self) -> None:
        """Refuse every later submit (the engine is shutting down); thread-safe."""
        with self._inbox_lock:
            self._closed = True

    def cancel(self, reqs: Sequence[Req], reason: str) -> None:
        """Ask for requests to leave at the start of the next step (thread-safe); finished ones are skipped."""
        with self._inbox_lock:
            self._cancels.extend((req, reason) for req in reqs if not req.done.is_set())

    def cancels_pending(self) -> int:
        """Cancellations asked for that the next step will carry out."""
        with self._inbox_lock:
            return len(self._cancels)

    def counts(self) -> tuple[int, int]:
        """(queued, running): waiting requests, and requests holding a request row."""
        with self._inbox_lock:
            inbox = len(self._inbox)
        return inbox + len(self.waiting), len(self.prefilling) + len(self.decoding)

    def has_work(self) -> bool:
        queued, running = self.counts()
        return bool(queued or running)

    def has_runnable_work(self) -> bool:
        """Whether a step would do anything: something runs, or something waits and admission is open."""
        queued, running = self.counts()
        return bool(running or (queued and not self.admission_paused) or self._cancels)

    # -- live settings (read from the step's snapshot) -------------------------------------

    def max_running(self) -> int:
        """`max_running_requests` now, within the planned capacity."""
        live = self.snap.schedule.max_running_requests if self.snap is not None else None
        cap = self.limits.max_running_requests
        return cap if live is None else min(int(live), cap)

    def chunk_size(self) -> int:
        """`chunked_prefill_size` now, within the planned capacity."""
        live = self.snap.schedule.chunked_prefill_size if self.snap is not None else None
        cap = self.limits.chunked_prefill_size
        return cap if live is None else min(int(live), cap)

    def stream_interval(self) -> int:
        return int(self.snap.serving.stream_interval) if self.snap is not None else 1

    # -- one step ------------------------------------------------------------------------

    def step(self) -> bool:
        """Admit, prefill one chunk batch, decode once; returns whether anything ran."""
        self.snap = self._settings()
        self.step_index += 1
        with self._inbox_lock:
            arrived = list(self._inbox)
            self._inbox.clear()
            cancels, self._cancels = self._cancels, []
        if not (self.waiting or self.prefilling or self.decoding):
            self.small_unit_seen = NEVER  # the engine was idle: no client is between two short requests
        self.waiting.extend(arrived)
        for req, reason in cancels:
            if not req.done.is_set():
                self.fail_request(req, reason, finish_reason="cancelled")
                self.counters["cancelled"] += 1
        self.expire_overdue()
        if self.hicache is not None:
            for req in arrived:
                self.hicache.start_prefetch(req.all_ids[: req.prefill_target])
        self._admit()
        if self._mixes() and self._mixed_step():
            self._promote_prefilled()  # they decode from the next step on
            ran = True
        else:
            ran = self._prefill()
            self._promote_prefilled()
            if self.decoding:
                self._decode()
                ran = True
        if self.window is not None:
            for req in [*self.prefilling, *self.decoding]:
                self._release_swa_behind_window(req)
        return ran

    def expire_overdue(self) -> list[Req]:
        """Fail every request past its deadline, wherever it is; returns them.

        Called at the start of each step, and by a caller whose wait ran past the deadline
        while no step ran (a paused or draining engine).
        """
        now = self.clock()
        with self._inbox_lock:
            late_inbox = [r for r in self._inbox if r.deadline is not None and now >= r.deadline]
            for req in late_inbox:
                self._inbox.remove(req)
        late = late_inbox + [
            r for r in [*self.waiting, *self.prefilling, *self.decoding] if r.deadline is not None and now >= r.deadline
        ]
        for req in late:
            msg = (
                f"request {req.rid} passed its deadline of {req.timeout_s:g} s before it finished "
                f"({len(req.output)} of {req.max_new_tokens} tokens) -- ask for fewer tokens or a longer timeout_s"
            )
            self.fail_request(req, msg, finish_reason="timeout")
            self.counters["timed_out"] += 1
        return late

    def fail_request(self, req: Req, message: str, *, finish_reason: str = "error") -> None:
        """Fail one request alone: take it off every queue, free what it holds, wake its caller."""
        for held in (self.waiting, self.prefilling, self.decoding):
            if req in held:
                held.remove(req)
        if req.row is not None:
            self._release(req, cache=False)
        req.error = message
        req.finish_reason = finish_reason
        req.finished_at = time.perf_counter()
        req.complete()

    def fail_running(self, reason: str) -> list[Req]:
        """Fail the requests that hold a row (those a failed step touched); queued ones keep waiting."""
        running = [*self.prefilling, *self.decoding]
        for req in running:
            self.fail_request(req, reason)
        return running

    def sample_or_fail(self, req: Req, logits: torch.Tensor) -> int | None:
        """One sampled token for `req`, or None when sampling failed: then this request alone is finished with the error."""
        try:
            return sample(logits, req)
        except Exception as exc:  # e.g. probabilities that are not finite: this request's inputs, nobody else's
            log.warning("scheduler.sample_failed", rid=req.rid, error=repr(exc))
            req.error = "sampling failed for this request -- check its temperature and sampling parameters"
            req.finish_reason = "error"
            return None

    def abort_all(self, reason: str) -> None:
        """Fail every request not yet finished (engine shutdown)."""
        with self._inbox_lock:
            pending = list(self._inbox)
            self._inbox.clear()
        for req in [*pending, *self.waiting, *self.prefilling, *self.decoding]:
            if req.row is not None:
                self._release(req, cache=False)
            req.error = reason
            req.finish_reason = "abort"
            req.complete()
        self.waiting.clear()
        self.prefilling.clear()
        self.decoding.clear()

    # -- prefill -------------------------------------------------------------------------

    def _promote_prefilled(self) -> None:
        ready = [r for r in self.prefilling if r.kv_len == r.prefill_target]
        if ready:
            self.prefilling = [r for r in self.prefilling if r.kv_len != r.prefill_target]
            self.decoding.extend(ready)

    def _prefill(self) -> bool:
        chunk = self._prefill_chunk()
        if not chunk:
            return False
        batch, ids, positions = self._extend_inputs(chunk)
        self.runner.forward(batch, ids, positions)
        if self.speculative is not None:
            # same slots, same table: the draft keeps its KV in step with the target's
            self.speculative.draft_extend(batch, ids, positions, [r for r, _, _ in chunk])
        self._prefilled(chunk)
        return True

    def _prefill_chunk(self) -> list[tuple[Req, int, torch.Tensor]]:
        """The requests of this step's prefill chunk, with the tokens each takes and their slots (allocated)."""
        budget = min(self.chunk_size(), self.limits.max_prefill_tokens)
        chunk: list[tuple[Req, int, torch.Tensor]] = []
        for req in list(self.prefilling):
            if budget <= 0:
                break
            take = min(req.prefill_target - req.kv_len, budget)
            if take <= 0:
                continue
            start = req.kv_len
            last = self.last_loc(req)

            def extend(s: int = start, t: int = take, ll: int = last) -> torch.Tensor | None:
                return self.allocator.alloc_extend([s], [s + t], [ll])

            slots = self.alloc_with_eviction(extend, take)
            capped = slots is None and not chunk and not self.decoding
            if capped:
                # alone, a request whose whole chunk does not fit takes what does: the SWA slots
                # behind the window are released after each step, so the rest follows in later
                # chunks; nothing decodes meanwhile, so the memory it holds starves no one
                take = min(take, self._prefill_room(start))
                if take > 0:
                    slots = self.allocator.alloc_extend([start], [start + take], [last])
            if slots is None:
                if not chunk and not self.decoding and self.prefilling[0] is req:
                    self._fail(req, "the prompt does not fit the KV pool -- shorten it or raise max_total_tokens")
                break
            self.req_pool.write(req.slot_row, start, slots)
            chunk.append((req, take, slots))
            budget -= take
            if capped:
                break  # the pool is full: later requests wait until this prompt is in
        return chunk

    @staticmethod
    def _extend_inputs(
        chunk: list[tuple[Req, int, torch.Tensor]], decode: Sequence[Req] = (), out: torch.Tensor | None = None
    ) -> tuple[ForwardBatch, torch.Tensor, torch.Tensor]:
        """The extend batch, token ids and positions of a prefill chunk, then (mixed) one new token per `decode` row."""
        rows = [(r, r.kv_len, n) for r, n, _ in chunk] + [(r, r.kv_len, 1) for r in decode]
        slots = [s for _, _, s in chunk] + ([] if out is None else [out])
        batch = ForwardBatch.extend(
            req_pool_indices=[r.slot_row for r, _, _ in rows],
            seq_lens=[start + n for _, start, n in rows],
            extend_prefix_lens=[start for _, start, _ in rows],
            out_cache_loc=torch.cat(slots),
        )
        ids = torch.tensor([t for r, start, n in rows for t in r.all_ids[start : start + n]], dtype=torch.long)
        positions = torch.cat([torch.arange(start, start + n) for _, start, n in rows])
        return batch, ids, positions

    def _prefilled(self, chunk: list[tuple[Req, int, torch.Tensor]]) -> None:
        for req, n, _ in chunk:
            req.kv_len += n
        self.counters["prefill_tokens"] += sum(n for _, n, _ in chunk)
        self.counters["prefill_batches"] += 1

    # -- mixed prefill and decode ------------------------------------------------------------

    def _mixes(self) -> bool:
        """Whether this step may run its prefill chunk and its decode rows as one forward."""
        on = bool(self.snap.schedule.enable_mixed_chunk) if self.snap is not None else False
        return on and self.speculative is None and bool(self.decoding) and bool(self.prefilling)

    def _mixed_step(self) -> bool:
        """One extend forward for the prefill chunk and every decoding request's next token; False when no chunk.

        A decode row is an extend of one token over its prefix, so the running requests
        pay one forward per step however much prefill shares it, rather than a prefill
        forward and a decode forward. A request whose prompt completes in this chunk
        decodes from the next step on. When no decode slot can be found (a request is
        failed for it) the chunk runs alone.
        """
        chunk = self._prefill_chunk()
        if not chunk:
            return False
        planned = self._decode_slots()
        if planned is None:
            batch, ids, positions = self._extend_inputs(chunk)
            self.runner.forward(batch, ids, positions)
            self._prefilled(chunk)
            return True
        reqs, out = planned
        batch, ids, positions = self._extend_inputs(chunk, reqs, out)
        logits = self.runner.forward(batch, ids, positions)
        self._prefilled(chunk)
        self.counters["mixed_batches"] += 1
        self._decoded(reqs, logits[-len(reqs) :])
        return True

    def _prefill_room(self, start: int) -> int:
        """Tokens a chunk starting at `start` can take now on every side of the allocator.

        That is the free part of the request's last page plus the whole free pages.
        """
        return (-start) % self.limits.page_size + int(self.allocator.available_size())

    def _fail(self, req: Req, message: str) -> None:
        self.prefilling.remove(req)
        self._release(req, cache=False)
        req.error = message
        req.finish_reason = "error"
        req.finished_at = time.perf_counter()
        req.complete()

    # -- decode --------------------------------------------------------------------------

    def _decode(self) -> None:
        if self.speculative is not None:
            self.speculative.step(self)
            return
        planned = self._decode_slots()
        if planned is None:
            return
        reqs, out = planned
        batch = ForwardBatch.decode(
            req_pool_indices=[r.slot_row for r in reqs], seq_lens=[r.kv_len + 1 for r in reqs], out_cache_loc=out
        )
        ids = torch.tensor([r.all_ids[-1] for r in reqs], dtype=torch.long)
        positions = torch.tensor([r.kv_len for r in reqs], dtype=torch.long)
        logits = self.runner.forward(batch, ids, positions)
        self._decoded(reqs, logits)

    def _decode_slots(self) -> tuple[list[Req], torch.Tensor] | None:
        """A KV slot for every decoding request's next token, written into its row (retracting or failing
        requests when memory runs out); None when a request was failed instead."""
        while True:
            reqs = self.decoding

            def decode(reqs: list[Req] = reqs) -> torch.Tensor | None:
                return self.allocator.alloc_decode([r.kv_len + 1 for r in reqs], [self.last_loc(r) for r in reqs])

            out = self.alloc_with_eviction(decode, len(reqs))
            if out is not None:
                break
            if not self._retract_newest():
                self._fail_decoding(reqs[0])
                return None
        table = self.req_pool.req_to_token
        table[[r.row for r in reqs], [r.kv_len for r in reqs]] = out.to(table.dtype)
        return reqs, out

    def _decoded(self, reqs: list[Req], logits: torch.Tensor) -> None:
        """Sample each request's next token from its row of `logits`, then release the finished ones."""
        self.counters["decode_batches"] += 1
        self.counters["decode_tokens"] += len(reqs)
        for req, token in zip(reqs, self.sample_all(reqs, logits), strict=True):
            req.kv_len += 1
            if token is not None:
                self.emit(req, token)
        self.reap()

    def sample_all(self, reqs: list[Req], logits: torch.Tensor) -> list[int | None]:
        """One token for each of `reqs` (row i of `logits` is request i's), None where sampling failed."""
        tokens: list[int | None] = [None] * len(reqs)
        plain = plain_argmax_rows(reqs)
        if plain:
            for i, token in zip(plain, torch.argmax(logits[plain], dim=-1).tolist(), strict=True):
                tokens[i] = token
        if len(plain) < len(reqs):
            drawn = set(plain)
            for i, req in enumerate(reqs):
                if i not in drawn:
                    tokens[i] = self.sample_or_fail(req, logits[i])
        return tokens

    def _fail_decoding(self, req: Req) -> None:
        self.decoding.remove(req)
        self._release(req, cache=False)
        req.error = "out of KV cache memory while decoding -- raise max_total_tokens or lower max_new_tokens"
        req.finish_reason = "error"
        req.finished_at = time.perf_counter()
        req.complete()

    def emit(self, req: Req, token: int) -> bool:
        """Append a sampled token; returns True when the request is finished by it."""
        if req.first_token_at is None:
            req.first_token_at = time.perf_counter()
        req.output.append(token)
        eos = token == self.limits.eos_token_id or token in self.limits.eos_token_ids
        if (not req.ignore_eos and eos) or token in req.params.stop_token_ids:
            req.finish_reason = "stop"
        elif req.params.stop and self._hits_stop(req):
            req.finish_reason = "stop"
        elif len(req.output) >= req.max_new_tokens:
            req.finish_reason = "length"
        req.push_chunks(self.stream_interval())
        return req.finish_reason is not None

    def _hits_stop(self, req: Req) -> bool:
        """Whether the output now holds a stop string; only its tail is decoded (a token is at least one byte)."""
        assert self.decode is not None  # new_request refuses stop strings without a decoder
        tail = max(len(s.encode()) for s in req.params.stop) + 4  # + a partial character at the front
        text = self.decode(req.output[-tail:])
        return any(s in text for s in req.params.stop)

    def reap(self) -> None:
        """Release finished decoding requests and wake their callers."""
        finished = [r for r in self.decoding if r.finish_reason is not None]
        if not finished:
            return
        self.decoding = [r for r in self.decoding if r.finish_reason is None]
        self.release_all(finished, cache=lambda r: r.error is None)  # freed before any caller wakes
        for req in finished:
            req.finished_at = time.perf_counter()
            self.counters["failed" if req.error is not None else "finished"] += 1
            req.complete()
