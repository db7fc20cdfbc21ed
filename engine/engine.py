"""The embedded engine: publish the config, build pools and backends, generate tokens.

`Engine(record)` publishes the record (role `scheduler`), reads everything it needs
from one config snapshot, decides where the weights come from (`engine.checkpoint`)
and checks a checkpoint against the config before anything is allocated, plans and
builds the KV pools, the attention backend(s), the model (the checkpoint's weights, or
random ones from `random_seed`), its tokenizer, the prefix cache, the HiCache tiers and a
draft worker when speculative decoding is on, then runs the scheduler on one
background thread. `generate()` is thread-safe: it queues a request and waits for it,
so concurrent callers are batched together (continuous batching); `stream()` gives the
same tokens as chunks of `stream_interval` tokens while they are sampled.

Config changes while it runs (`override_config`, HiCache attach/detach) are applied by
the caller's thread between two scheduler steps (`engine.boundary`), as each field
declares: `step` fields at the next boundary, under load; `drain` fields once
admission paused and the running requests finished; `restart` fields are refused.
Fields that size planned memory are bounded by the capacity planned at start-up
(`engine.capacity`). The call returns once the change is live.

How the parts are built (pools, model, caches, scheduler) is `engine.engine_build`'s.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs
import structlog

from engine.chat_template import load_chat_template
from engine.checkpoint import choose_weights, read_checkpoint
from engine.engine_build import EngineBuilding
from engine.engine_storage import EngineStorage, under_own_context
from engine.errors import (
    DeadlineExceeded,
    DrainTimeout,
    EngineBusy,
    EngineStateError,
    EngineStopped,
    GenerationError,
    OwnDeadlineExceeded,
    RequestCancelled,
    WaitTimedOut,
)
from engine.machine import checked_launch
from engine.model import run_sizes
from engine.request_params import RequestOptions, SamplingParams, check_timeout, refuse, submit_args
from engine.results import GenerateResult, GenerateStats, result_of
from engine.scheduler import Req
from engine.streaming import TokenStream
from engine.submission import new_requests
from engine.tokenizer import Tokenizer, choose_tokenizer, stop_token_ids
from mem_cache.kv_cache_configurator import device_of
from runtime.context import RuntimeContext, publish, use_context, withdraw
from runtime.serving import configure_logs as configure_serving_logs
from runtime.serving import (
    get_serving,
)
from sgconf.errors import BadArgument
from sgconf.serving import load

log = structlog.get_logger(__name__)


class Engine(EngineBuilding, EngineStorage):
    """A running model with its pools, caches and scheduler thread; see the module docstring."""

    # the owner of the overrides it commits: their receipts revert through `revert()`
    owner_name = "engine"

    def __init__(
        self,
        record: Any = None,
        *,
        context: RuntimeContext | None = None,
        model_config: dict[str, Any] | None = None,
        configure_logs: bool = False,
        compile_backend: Any = "inductor",
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        """Publish `record` and build everything, or run on `context`, one made by `create_context()`.

        An engine given a context publishes nothing process-wide: it builds, steps and
        takes overrides under `use_context(context)`, so several engines (each with its own
        `base_gpu_id`, page size or storage) share one process. `compile_backend` is what
        `torch.compile` uses when `enable_torch_compile` is on (a callable backend lets
        tests count compiles); `clock` is what request deadlines are measured on.
        """
        if (record is None) == (context is None):
            raise BadArgument("Engine() takes a record to publish or a context from create_context(), exactly one")
        self._compile_backend = compile_backend
        self.clock = clock
        self._owns_context = context is not None
        if context is not None:
            self.model_config, self.shape = checked_launch(context.record, model_config or context.model)
            self.context = context
        else:  # refused before publishing: a server that cannot start leaves nothing live
            self.model_config, self.shape = checked_launch(record, model_config)
            self.context = publish(record, role="scheduler", model=self.model_config)
        with self._in_context():
            self._start(configure_logs)

    def _in_context(self) -> contextlib.AbstractContextManager[Any]:
        """The engine's own context for the block when it was given one; nothing to do when it published."""
        return use_context(self.context) if self._owns_context else contextlib.nullcontext()

    def _start(self, configure_logs: bool) -> None:
        if configure_logs:
            configure_serving_logs()
        snap: Any = self.context.snapshot()  # one consistent config for every building step below
        try:
            self._build(snap)
        except BaseException:
            # a refused model leaves no half-built engine behind, nor its config live
            if not self._owns_context:
                withdraw(self.context)
            raise
        log.info("engine.start", **self._startup_summary(snap))

    def _build(self, snap: Any) -> None:
        """Everything after publishing: weights source, tokenizer, pools, model, caches, scheduler, loop."""
        self.weights_source = choose_weights(snap)
        self.checkpoint = read_checkpoint(self.weights_source, self.shape, self.model_config)
        self.tokenizer: Tokenizer = choose_tokenizer(snap, self.weights_source, run_sizes(self.shape)[2])
        self.eos_token_ids = stop_token_ids(snap, self.shape.eos_token_ids)
        self.chat_template = load_chat_template(snap)  # what the chat routes render; a bad one fails here
        self.device = device_of(snap)  # cuda:<base_gpu_id> on cuda
        self.seed = int(snap.device.random_seed or 0)
        self._lock = threading.RLock()  # held by the loop for each step and by admin operations
        self._wake = threading.Condition(self._lock)
        self._stopping = False
        self._paused = False
        self._started = time.time()

        self._build_model(snap)
        self._build_caches(snap)
        self.scheduler = self._build_scheduler(snap)
        self._build_live_config(snap)
        self._thread = threading.Thread(target=self._loop, name="sgconf-engine", daemon=True)
        self._thread.start()
        self._nudged = threading.Event()
        self._waker = threading.Thread(target=self._wake_on_nudge, name="sgconf-engine-waker", daemon=True)
        self._waker.start()

    @classmethod
    def from_args(cls, argv: Sequence[str], *, env: dict[str, str] | None = None) -> Engine:
        """Load a record from CLI-style flags (plus env and `--config`) and build an engine on it."""
        return cls(load(list(argv), env=env if env is not None else {}).record)

    # -- the loop ------------------------------------------------------------------------

    def _loop(self) -> None:
        with self._in_context():
            self._run_loop()

    def _run_loop(self) -> None:
        while True:
            with self._wake:
                while True:
                    self.boundary.serve()  # every pass through here is a step boundary
                    if self._stopping:
                        return
                    if not self._paused and not self.boundary.holding() and self.scheduler.has_runnable_work():
                        break
                    self._wake.wait()
                self._step_locked()

    def _step_locked(self) -> bool:
        self._stepping = True
        generation = self.context.generation
        self.scheduler.counters["steps"] += 1
        try:
            return self.scheduler.step()
        except Exception as exc:  # a bug must fail the requests, not hang their callers
            # only the requests the step touched fail; queued ones run in the next step
            failed = self.scheduler.fail_running("internal error in the engine step -- see the server log")
            log.exception("engine.step_failed", error=repr(exc), failed=[r.rid for r in failed])
            return False
        finally:
            self._stepping = False
            if self.context.generation != generation:  # a change that bypassed the step boundary
                self.scheduler.counters["steps_across_generations"] += 1

    @under_own_context
    def step(self) -> bool:
        """Run one scheduler step on a paused engine; returns whether anything ran.

        The loop thread never steps while paused, so a test (or a tool) that calls this
        decides alone which requests share each step. Holds asked for
        meanwhile are granted at the boundaries before and after the step, and nothing
        steps while one is held.
        """
        with self._wake:
            if not self._paused:
                raise EngineStateError("step() drives a paused engine -- call pause() first")
            self.boundary.serve()
            ran = False
            if not self.boundary.holding() and self.scheduler.has_runnable_work():
                ran = self._step_locked()
            self.boundary.serve()
            self._wake.notify_all()
            return ran

    @property
    def stepping(self) -> bool:
        """Whether a scheduler step is running right now (config changes never land then)."""
        return self._stepping

    # -- public API ----------------------------------------------------------------------

    @under_own_context
    def generate(
        self, prompt_or_ids: str | Sequence[int], *, timeout: float | None = None, **params: Any
    ) -> GenerateResult:
        """Generate tokens for one prompt; thread-safe, batched with concurrent calls.

        `params` are `submit`'s (the fields of `SamplingParams`, and timeout_s). Greedy at
        temperature 0; sampling draws from a generator seeded with `seed` (default
        `random_seed`), so the same prompt and seed give the same tokens. Raises
        RequestRejected for a request that can never fit, EngineStopped after shutdown,
        GenerationError when the request failed inside the engine, DeadlineExceeded when it
        did not finish within its deadline.
        """
        return self.wait(self.submit(prompt_or_ids, **params), timeout=timeout)

    @under_own_context
    def stream(self, prompt_or_ids: str | Sequence[int], *, timeout: float | None = None, **params: Any) -> TokenStream:
        """Like `generate`, but returns at once with an iterator of token chunks.

        Each chunk holds `stream_interval` tokens (read when the chunk fills, so an
        override applies to the next chunk), the last one what is left; after the
        iteration `result()` gives the full result. Raises like `generate`: a refused
        request before anything is returned, a failure inside the engine from the iterator.
        """
        req = self.submit(prompt_or_ids, stream=True, **params)
        return self.token_stream(req, timeout=timeout)

    def token_stream(self, req: Req, *, timeout: float | None = None) -> TokenStream:
        """The chunks of a request submitted with `stream=True`, its text cut at its stop strings."""
        return TokenStream(req, self.tokenizer, lambda: self.wait(req, timeout=timeout), timeout=timeout)

    @under_own_context
    def submit(
        self,
        prompt_or_ids: str | Sequence[int],
        *,
        stream: bool = False,
        add_special_tokens: bool = True,
        **params: Any,
    ) -> Req:
        """Queue one request and return at once with its handle (for `wait`); raises like `generate`.

        `params` are the fields of `SamplingParams` (max_new_tokens, temperature, top_p,
        top_k, min_p, the penalties, stop, stop_token_ids, ignore_eos, seed) and
        `timeout_s`, checked by the one request model (`engine.request_params`), as are
        `stream` and `add_special_tokens`: a bad one is an InvalidRequest naming it,
        exactly as over HTTP. The deadline is `timeout_s` (at most `request_timeout_s`),
        by default `request_timeout_s`, from now on the engine's clock. With the loop
        paused (`pause()`), queued requests run only when `step()` is called, which lets
        a caller fix the exact interleaving of a batch. `add_special_tokens=False`
        tokenizes text that already carries them (a rendered chat).
        """
        sampling, options = submit_args({**params, "stream": stream, "add_special_tokens": add_special_tokens})
        return self._submit_checked([(prompt_or_ids, sampling)], options)[0]

    @under_own_context
    def submit_batch(
        self,
        items: Sequence[tuple[str | Sequence[int], SamplingParams]],
        *,
        stream: bool = False,
        timeout_s: float | None = None,
        add_special_tokens: bool = True,
    ) -> list[Req]:
        """Queue several requests as one unit of work (a batch, or the n choices of a prompt); all or none.

        The options are checked by the request model (`RequestOptions`), each item's
        sampling is a `SamplingParams` (checked when it was built). Admission shares rows
        fairly between units (`engine.policy.fair_share`), so a large batch never holds
        back another client's request for more than a few steps.
        """
        for i, (_, sampling) in enumerate(items):
            if not isinstance(sampling, SamplingParams):
                raise refuse(f"$.items[{i}]", f"expected SamplingParams (got {type(sampling).__name__})")
        options = RequestOptions(stream=stream, timeout_s=timeout_s, add_special_tokens=add_special_tokens)
        return self._submit_checked(items, options)

    def _submit_checked(
        self, items: Sequence[tuple[str | Sequence[int], SamplingParams]], options: RequestOptions
    ) -> list[Req]:
        deadline = check_timeout(options.timeout_s, get_serving().request_timeout_s)
        vocab = run_sizes(self.shape)[2]
        reqs = new_requests(
            self.scheduler, self.tokenizer, items, vocab=vocab, seed=self.seed, timeout_s=deadline, options=options
        )
        # no engine lock: a submit must not wait behind the steps of other clients' work
        if self._stopping or not self.scheduler.submit_all(reqs):
            raise EngineStopped("the engine is shut down -- start a new one")
        self._nudge()
        return reqs

    def cancel(self, reqs: Sequence[Req], reason: str = "the client went away") -> None:
        """Take requests out at the next step boundary, freeing their KV (their client disconnected).

        Never waits for a step in flight: the server calls this on its event loop, and the
        loop re-takes the engine lock step after step, so waiting for it would stall every
        connection until the engine ran out of work.
        """
        self.scheduler.cancel(reqs, reason)
        self._nudge()

    def _nudge(self) -> None:
        """Wake the loop if it waits for work, without blocking on the lock a step holds.

        A loop that holds the lock looks at the scheduler again before it waits, and sees
        what was queued before this call; only between that look and its wait could it
        miss it, so a busy lock hands the notify to the waker thread, which delivers it
        once the loop lets go of the lock.
        """
        if self._wake.acquire(blocking=False):
            try:
                self._wake.notify_all()
            finally:
                self._wake.release()
        else:
            self._nudged.set()

    def _wake_on_nudge(self) -> None:
        while True:
            self._nudged.wait()
            self._nudged.clear()
            with self._wake:
                if self._stopping:
                    return
                self._wake.notify_all()

    def expire_overdue(self) -> None:
        """Fail the requests past their deadline now (a waiter whose deadline passed while no step ran)."""
        with self._wake:
            self.scheduler.expire_overdue()

    @under_own_context
    def wait(self, req: Req, *, timeout: float | None = None) -> GenerateResult:
        """Wait for a submitted request and return its result; raises like `generate`.

        A request whose deadline passes while no step runs (a paused engine) is failed
        here, so its caller never waits past the deadline for a step to notice.
        """
        return self._wait(req, timeout)

    @under_own_context
    def wait_all(self, reqs: Sequence[Req]) -> list[GenerateResult]:
        """`wait` for each of `reqs` (one unit of work) in order; raises as the first failed one does.

        A unit is answered whole or not at all: once one item fails, nobody will read the
        others, so those still queued or running are cancelled rather than left to spend
        rows and KV to the end (a replica group's caller has no handle left to cancel them).
        """
        try:
            return [self._wait(req, None) for req in reqs]
        except BaseException:
            self.cancel([req for req in reqs if not req.done.is_set()], "another item of its unit failed")
            raise

    def _wait(self, req: Req, timeout: float | None) -> GenerateResult:
        limit = None if timeout is None else time.monotonic() + timeout
        while not req.done.is_set():
            left = None if limit is None else limit - time.monotonic()
            if left is not None and left <= 0:
                raise WaitTimedOut(f"request {req.rid} did not finish in {timeout} s")
            until_deadline = None if req.deadline is None else max(req.deadline - self.clock(), 0.0)
            waits = [w for w in (left, until_deadline) if w is not None]
            if req.done.wait(min(waits) if waits else None):
                break
            if req.deadline is not None and self.clock() >= req.deadline:
                self.expire_overdue()
        if req.error is not None:
            if req.finish_reason == "cancelled":
                raise RequestCancelled(req.error)
            if req.finish_reason == "abort":
                raise EngineStopped(req.error)
            if req.finish_reason == "timeout":
                raise (OwnDeadlineExceeded if req.own_deadline else DeadlineExceeded)(req.error)
            raise GenerationError(req.error)
        return self._result(req)

    def _result(self, req: Req) -> GenerateResult:
        return result_of(req, self.tokenizer, speculative=self.speculative is not None)

    def busy_counts(self) -> tuple[int, int]:
        """(queued, running) requests right now."""
        return self.scheduler.counts()

    @under_own_context
    def stats(self) -> dict[str, Any]:
        """Engine-wide counters: pools, cache use, batches, speculative accept length, HiCache."""
        queued, running = self.busy_counts()
        counters = dict(self.scheduler.counters)
        out: dict[str, Any] = {
            "queued": queued,
            "running": running,
            "uptime_s": round(time.time() - self._started, 3),
            "pools": self.memory.describe(),
            "available_kv_tokens": int(self.memory.allocator.available_size()),
            "counters": counters,
        }
        if self.prefix_cache is not None:
            s = self.prefix_cache.stats()
            out["prefix_cache"] = attrs.asdict(s)
        if self.speculative is not None:
            sp = self.speculative
            out["speculative"] = {
                "algorithm": sp.algorithm,
                "num_steps": sp.num_steps,
                "verify_steps": sp.verify_steps,
                "accept_length": round(sp.accept_length, 4),
                "accepted_draft_tokens": sp.accepted,
                "proposed_draft_tokens": sp.proposed,
            }
        if self.hicache is not None:
            out["hicache"] = self.hicache.stats()
        return out

    @under_own_context
    def abort_requests(self, reason: str) -> int:
        """Fail every queued and running request with EngineStopped(`reason`); the engine keeps running."""
        with self._wake:
            queued, running = self.scheduler.counts()
            self.scheduler.abort_all(reason)
        return queued + running

    @under_own_context
    def usage(self) -> dict[str, float]:
        """Share of KV slots in use, and of looked-up prompt tokens the prefix cache served, for `/metrics`."""
        total = max(1, int(self.memory.allocator.size))
        out = {"token_usage": 1.0 - int(self.memory.allocator.available_size()) / total}
        if self.prefix_cache is not None:
            s = self.prefix_cache.stats()
            out["cache_hit_rate"] = s.hit_tokens / s.lookup_tokens if s.lookup_tokens else 0.0
        return out

    @under_own_context
    def flush_cache(self) -> int:
        """Drop every cached prefix page and return how many tokens were freed; idle only.

        Raises EngineBusy while requests are queued or running: their pages are locked in
        the cache, and a flush that kept them would not be the empty cache it promises.
        """
        with self._lock:
            queued, running = self.busy_counts()
            if queued or running:
                msg = (
                    f"cannot flush the cache while requests run ({queued} queued, {running} running) -- retry when idle"
                )
                raise EngineBusy(msg, queued=queued, running=running)
            if self.prefix_cache is None:
                return 0
            before = self.prefix_cache.stats().cached_tokens
            self.prefix_cache.reset()
            return before - self.prefix_cache.stats().cached_tokens

    def pause(self) -> None:
        """Stop stepping (requests queue up but do not run) until `resume()`; for draining and tests."""
        with self._wake:
            self._paused = True

    def resume(self) -> None:
        with self._wake:
            self._paused = False
            self._wake.notify_all()

    @under_own_context
    def override_config(self, source: str, **fields: Any) -> Any:
        """A post-publish override, applied between two steps as its fields declare; returns the receipt once live.

        Everything is checked first (names, types, hot or allowed source, rules, the
        planned capacity), so bad input fails at once. `step` fields then apply at the
        next step boundary, under load; `drain` fields after a drain. Raises ConfigError
        (and its subclasses) for bad input, DrainTimeout when a drain did not finish
        within `drain_timeout_s`, EngineStopped after shutdown; nothing changes then.
        """
        proposal = self.context.validate_override(source, **fields)
        self.capacity.check(proposal.values, source)
        drain = self.context.schema.apply_mode(proposal.values) == "drain"
        with self._boundary_hold(drain=drain, what="override config"):
            # re-checked at the boundary: another change may have landed while we waited
            proposal = self.context.validate_override(source, **fields)
            self.capacity.check(proposal.values, source)
            return self.context.commit(proposal, owner=self)

    @under_own_context
    def revert(self, receipt: Any) -> Any:
        """Undo an override made through this engine, as it was made: what `receipt.revert()` calls.

        `step` fields go back at the next step boundary, `drain` fields after a drain;
        a storage attach or detach is undone too (the backend detached, or the previous
        one attached again), all or nothing: when that fails, config and cache stay as
        they were. Raises RevertConflict (a later override covers a field), DrainTimeout,
        EngineStopped, StorageRefused; nothing changes then.
        """
        drain = self.context.schema.apply_mode(receipt.fields) == "drain"
        effect = None
        if self.hicache is not None and self.hicache.touches_storage(receipt.fields):
            effect = self.hicache.restore
        with self._boundary_hold(drain=drain, what="revert an override"):
            return self.context.revert(receipt, owner=self, effect=effect)

    def hold_boundary(self, *, drain: bool, what: str, timeout_s: float | None = None) -> contextlib.ExitStack:
        """Park the loop at the next step boundary (after a drain, when `drain`) until the returned stack is closed.

        For a change prepared now and committed later (a propagated override: the
        replica votes, then commits or aborts); `timeout_s` defaults to
        `drain_timeout_s`. Raises DrainTimeout or EngineStopped; nothing is held then.
        """
        stack = contextlib.ExitStack()
        stack.enter_context(self._boundary_hold(drain=drain, what=what, timeout_s=timeout_s))
        return stack

    @contextlib.contextmanager
    def _boundary_hold(self, *, drain: bool, what: str, timeout_s: float | None = None) -> Iterator[None]:
        from runtime.serving import get_schedule

        timeout = float(get_schedule().drain_timeout_s) if timeout_s is None else timeout_s
        with self.boundary.hold(drain=drain, timeout_s=timeout, what=what):
            # holds granted at one boundary apply one after another: an attach validates,
            # opens and commits in three moves that another change must not split
            with self._apply_lock:
                yield

    # -- HiCache storage -----------------------------------------------------------------

    def progress(self) -> int:
        """Scheduler steps that did work so far: a replica's controller watches it grow while requests run."""
        counters = self.scheduler.counters
        return int(counters["prefill_batches"] + counters["decode_batches"])

    # -- lifecycle -----------------------------------------------------------------------

    def shutdown(self, *, unpublish: bool = True) -> None:
        """Stop the loop, fail pending requests, flush HiCache; with `unpublish`, forget the context if it is ours."""
        with self._wake:
            if self._stopping:
                return
            self._stopping = True
            self._wake.notify_all()
        self._nudged.set()  # the waker sees `_stopping` and ends
        self.boundary.close()
        self._thread.join(timeout=30)
        self._waker.join(timeout=30)
        with self._lock:
            self.scheduler.close()  # a submit racing the shutdown is refused, or failed just below
            self.scheduler.abort_all("the engine was shut down")
            if self.hicache is not None:
                self.hicache.close()
        log.info("engine.stop")
        if unpublish and not self._owns_context:
            withdraw(self.context)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def freeze_start_up_heap() -> None:
    """Move every object alive now into the collector's permanent generation (`gc.freeze`).

    A serving process builds its model, pools, modules and config once, then keeps them
    for its life; a full collection under load walks all of them. Beside a client sending
    200-item batches that walk paused the engine loop for about 120 ms, six times a short
    request's whole latency. Called once by the processes that serve (the server, each
    replica) when they are built, never by an embedding program's engine: a frozen object
    is never freed.
    """
    gc.collect()
    gc.freeze()


__all__ = [
    "DrainTimeout",
    "Engine",
    "EngineBusy",
    "EngineStopped",
    "GenerateResult",
    "GenerateStats",
    "GenerationError",
    "freeze_start_up_heap",
]
