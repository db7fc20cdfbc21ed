"""HiCacheController: moves KV pages between the device pool, the host pool and storage.

The controller is handed the device KV pool and plain config values (the engine
reads them through accessors); it reads no configuration itself. Pages are named by
`page_keys` seeded with the pool layout's tag, so a key means "this token prefix,
this model geometry" in every process.

Flow, as the engine uses it:
  backup(ids, dev_idx)        after a prefill: full pages -> host (-> storage per policy)
  lookup(ids) -> tokens       how long a prefix host + storage could supply
  prefetch(ids) -> result     storage -> host, waiting per the prefetch policy
  load(ids, n, dev_idx)       host (falling back to storage) -> device; returns tokens loaded

Write policies: `write_through` stores a page in host and storage at backup time;
`write_back` keeps it in host only and stores it when it is evicted from host, on
`flush()` or on detach; `write_through_selective` stores a page once it has been
loaded back at least once (proven reuse), and on nothing else.

Storage I/O runs on background threads (one writer, `io_threads` readers, one for the
existence checks of lookups, so they never queue behind slow reads); host pool
and device copies (`mem_cache.hicache.device_copy`) happen under one lock. Storage
errors never reach the caller: damaged or forged pages are counted and treated as
missing; failed writes are counted and back the backend off (it reports itself
degraded). No call on the engine's path waits on storage longer than `read_timeout_s`:
a read that takes longer counts in `stats.read_timeouts` and is a miss.

Attach is two-phase, so several ranks can make it all-or-nothing:
`prepare_attach` opens and validates the backend without touching the controller,
then `commit_attach` (cannot fail on a valid handle) or `abort_attach` (releases it
and removes a directory that opening created). `attach_storage_backend` does both.

What the controller reports (`HiCacheStats`, `PrefetchResult`, `StorageStatus`) and the
handle of a prepared attach live in `mem_cache.hicache.reports`.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import structlog
import torch

from mem_cache.hicache.attach_inputs import (
    PREFETCH_POLICIES,
    PREFETCH_POLICY_FIELD,
    WRITE_POLICIES,
    WRITE_POLICY_FIELD,
    check_choice,
    parse_extra_config,
)
from mem_cache.hicache.backends import create_storage_backend
from mem_cache.hicache.device_copy import as_index, read_device, write_device
from mem_cache.hicache.errors import AttachStateError, LayoutMismatchError, StorageAttachError
from mem_cache.hicache.host_pool import EvictedPage, HostKVPool
from mem_cache.hicache.layout import KVLayout, host_pool_pages, layout_of
from mem_cache.hicache.prefix_keys import page_keys
from mem_cache.hicache.reports import HiCacheStats, PrefetchResult, PreparedAttach, StorageStatus
from mem_cache.hicache.storage import StorageBase

log = structlog.get_logger("mem_cache.hicache")


class HiCacheController:
    """Ties one device KV pool to a host pool and an optional storage backend.

    `host_pages` sets the host capacity in pages directly; otherwise it follows
    `hicache_size` (GB, when > 0) or `hicache_ratio` x `device_tokens` (default: the
    pool's `size`). Raises ValueError for an unknown policy or a pool without layers.
    """

    def __init__(
        self,
        kv_pool: Any,
        *,
        page_size: int | None = None,
        host_pages: int | None = None,
        device_tokens: int | None = None,
        hicache_ratio: float = 2.0,
        hicache_size: int = 0,
        write_policy: str = "write_through",
        prefetch_policy: str = "best_effort",
        prefetch_timeout_s: float = 2.0,
        read_timeout_s: float = 5.0,
        mac_secret: str | None = None,
        layer_ids: Sequence[int] | None = None,
        pin_memory: bool | None = None,
        io_threads: int = 2,
    ) -> None:
        check_choice(WRITE_POLICY_FIELD, write_policy, WRITE_POLICIES, ValueError)
        check_choice(PREFETCH_POLICY_FIELD, prefetch_policy, PREFETCH_POLICIES, ValueError)
        self.kv_pool = kv_pool
        self.layout: KVLayout = layout_of(kv_pool, page_size=page_size, layer_ids=layer_ids)
        self.page_size = self.layout.page_size
        if host_pages is None:
            tokens = device_tokens if device_tokens is not None else int(kv_pool.size)
            host_pages = host_pool_pages(tokens, self.layout, hicache_ratio=hicache_ratio, hicache_size=hicache_size)
        self.host = HostKVPool(self.layout, host_pages, pin_memory=pin_memory)
        self.write_policy = write_policy
        self.prefetch_policy = prefetch_policy
        self.prefetch_timeout_s = prefetch_timeout_s
        self.read_timeout_s = read_timeout_s
        self._mac_secret = mac_secret
        self._lock = threading.RLock()
        self._attach_lock = threading.Lock()
        self._backend: StorageBase | None = None
        self._backend_name: str | None = None
        self._extra_config: Mapping[str, Any] | None = None
        self._writer = cf.ThreadPoolExecutor(1, thread_name_prefix="hicache-write")
        self._readers = cf.ThreadPoolExecutor(max(1, io_threads), thread_name_prefix="hicache-read")
        # existence checks have their own thread: behind slow page reads they would wait for them
        self._lookups = cf.ThreadPoolExecutor(1, thread_name_prefix="hicache-lookup")
        self._pending_writes: set[cf.Future[bool]] = set()
        self._inflight: dict[str, cf.Future[bool]] = {}
        self._retired_corrupt = 0
        self._retired_forged = 0
        self._retired_oversized = 0
        self._retired_unsafe = 0
        self._counts = dict.fromkeys(
            (
                "backed_up_pages",
                "host_hits",
                "storage_hits",
                "prefetched_pages",
                "storage_writes",
                "write_errors",
                "host_evictions",
                "layout_mismatches",
                "read_timeouts",
            ),
            0,
        )
        self._closed = False

    # -- keys -------------------------------------------------------------------------
    def keys(self, token_ids: Sequence[int]) -> list[str]:
        """The page keys of `token_ids` under this pool's layout (one per full page)."""
        return page_keys(token_ids, self.page_size, namespace=self.layout.tag)

    # -- device <-> host ----------------------------------------------------------------
    def backup(self, token_ids: Sequence[int], device_indices: Any, *, start: int = 0) -> int:
        """Copy the full pages of `token_ids[start:]` held at `device_indices` to host.

        `device_indices[i]` is the device slot of token `start + i`; `start` must be a
        multiple of the page size. Pages already in host are only refreshed in LRU
        order. Returns how many pages were newly copied.
        """
        self._check_start(start)
        page = self.page_size
        loc = as_index(device_indices)
        keys = self.keys(token_ids)
        first = start // page
        last = min(len(keys), (start + int(loc.numel())) // page)
        if last <= first:
            return 0
        sel = keys[first:last]
        with self._lock:
            new = [(i, k) for i, k in enumerate(sel) if k not in self.host]
            copied = 0
            if new:
                slots, evicted = self.host.allocate(
                    [k for _, k in new], protect=sel, save_unstored=self._saves_on_evict()
                )
                new = new[: len(slots)]
                if new:
                    idx = torch.cat([loc[i * page : (i + 1) * page] for i, _ in new])
                    k, v = read_device(self.kv_pool, self.layout, idx)
                    self.host.write(slots[: len(new)], k, v)
                    copied = len(new)
                    self._counts["backed_up_pages"] += copied
                self._handle_evicted(evicted)
            if self._backend is not None and self.write_policy == "write_through":
                for key in sel:
                    p = self.host.page(key)
                    if p is not None and not p.stored:
                        self._store(key)
            self.host.touch(sel)
        return copied

    def lookup(self, token_ids: Sequence[int], *, start: int = 0) -> int:
        """How many leading tokens host and storage together could supply, as an end offset.

        Counting starts at token `start` (a page multiple: what the device already
        holds); the result is `start` plus the whole pages available contiguously after
        it, so `lookup(ids, start=m) - m` tokens are worth loading.
        """
        self._check_start(start)
        keys = self.keys(token_ids)[start // self.page_size :]
        with self._lock:
            n = self.host.prefix_length(keys)
            backend = self._backend
        if backend is not None and n < len(keys):
            n += self._stored_run(backend, keys[n:])
        return start + n * self.page_size

    def prefetch(self, token_ids: Sequence[int], *, start: int = 0, policy: str | None = None) -> PrefetchResult:
        """Start reading the storage pages that extend the host prefix, wait per policy.

        best_effort returns at once; wait_complete waits until every requested page is
        read; timeout waits up to `prefetch_timeout_s`. Pages keep arriving in host
        after a best_effort/timeout return. `policy` overrides the controller's.
        Pages before token `start` are taken as held by the device and skipped;
        `ready_tokens` is an end offset like lookup's.
        """
        policy = policy or self.prefetch_policy
        check_choice(PREFETCH_POLICY_FIELD, policy, PREFETCH_POLICIES, ValueError)
        self._check_start(start)
        keys = self.keys(token_ids)[start // self.page_size :]
        with self._lock:
            backend = self._backend
            n = self.host.prefix_length(keys)
        futures: list[cf.Future[bool]] = []
        if backend is not None and n < len(keys):
            protect = tuple(keys)
            for key in keys[n : n + self._stored_run(backend, keys[n:])]:
                with self._lock:
                    if key in self.host:
                        continue
                futures.append(self._request_fetch(backend, key, protect))
        timed_out = False
        if futures and policy != "best_effort":
            # wait_complete still waits at most read_timeout_s: a hung tier must not hang a step
            bounded = policy == "timeout" and self.prefetch_timeout_s <= self.read_timeout_s
            timeout = self.prefetch_timeout_s if bounded else self.read_timeout_s
            _, not_done = cf.wait(futures, timeout=timeout)
            timed_out = bool(not_done)
            if timed_out and not bounded:
                self._count_timeout("prefetch", len(not_done))
        with self._lock:
            self.host.touch(keys)
            ready = self.host.prefix_length(keys)
        fetched = sum(1 for f in futures if f.done() and not f.cancelled() and f.result())
        pending = sum(1 for f in futures if not f.done())
        return PrefetchResult(start + ready * self.page_size, len(futures), fetched, pending, timed_out)

    def load(self, token_ids: Sequence[int], n_tokens: int, device_indices: Any, *, start: int = 0) -> int:
        """Copy the pages of `token_ids[start:n_tokens]` into the device slots given.

        `device_indices[i]` receives token `start + i`. Pages missing from host are read
        from storage synchronously; loading stops at the first page neither has.
        Returns the tokens loaded (whole pages, counted from `start`); the caller frees
        the slots beyond that.
        """
        self._check_start(start)
        page = self.page_size
        loc = as_index(device_indices)
        keys = self.keys(list(token_ids)[:n_tokens])
        sel = keys[start // page :]
        sel = sel[: int(loc.numel()) // page]
        if not sel:
            return 0
        with self._lock:
            from_host = self.host.prefix_length(sel)
            backend = self._backend
        if from_host < len(sel) and backend is not None:
            protect = tuple(sel)
            deadline = time.monotonic() + self.read_timeout_s
            for key in sel[from_host:]:
                try:
                    ok = self._request_fetch(backend, key, protect).result(
                        timeout=max(0.0, deadline - time.monotonic())
                    )
                except cf.TimeoutError:
                    self._count_timeout("load", 1)
                    break
                if not ok:
                    break
        with self._lock:
            n = self.host.prefix_length(sel)
            if n == 0:
                return 0
            pages = [self.host.page(k) for k in sel[:n]]
            k, v = self.host.read([p.slot for p in pages if p is not None])
            write_device(self.kv_pool, self.layout, loc[: n * page], k, v, non_blocking=self.host.pin_memory)
            self._counts["host_hits"] += min(from_host, n)
            for key, p in zip(sel[:n], pages, strict=True):
                assert p is not None
                p.hits += 1
                if self.write_policy == "write_through_selective" and self._backend is not None and not p.stored:
                    self._store(key)
            self.host.touch(sel[:n])
        return n * page

    def flush(self) -> None:
        """Store every host page the backend lacks (write_back), then wait for all writes."""
        with self._lock:
            if self._backend is not None and self.write_policy == "write_back":
                for key in self.host.unstored_keys():
                    self._store(key)
            pending = list(self._pending_writes)
            backend = self._backend
        cf.wait(pending)
        if backend is not None:
            backend.flush()

    # -- attach / detach ---------------------------------------------------------------
    def prepare_attach(
        self,
        backend: str,
        extra_config: Mapping[str, Any] | str | None = None,
        *,
        prefetch_policy: str | None = None,
        write_policy: str | None = None,
    ) -> PreparedAttach:
        """Open and validate a backend without changing the controller.

        `extra_config` may be a mapping or its JSON text. Raises StorageAttachError
        naming the field at fault; then nothing was opened or created.
        """
        prefetch_policy = prefetch_policy or self.prefetch_policy
        write_policy = write_policy or self.write_policy
        check_choice(PREFETCH_POLICY_FIELD, prefetch_policy, PREFETCH_POLICIES, StorageAttachError)
        check_choice(WRITE_POLICY_FIELD, write_policy, WRITE_POLICIES, StorageAttachError)
        options = parse_extra_config(extra_config)
        opened = create_storage_backend(backend, options, mac_secret=self._mac_secret)
        opened.bound_pages(self.layout.page_bytes)  # a stored page larger than our layout's is never read whole
        return PreparedAttach(backend, dict(options), opened, prefetch_policy, write_policy, id(self))

    def commit_attach(self, prepared: PreparedAttach) -> StorageStatus:
        """Make a prepared backend the attached one (detaching, and flushing, any previous)."""
        with self._attach_lock:
            self._settle(prepared, "committed")
            if self._backend is not None:
                self._detach_locked()
            with self._lock:
                self._backend = prepared.backend
                self._backend_name = prepared.backend_name
                self._extra_config = prepared.extra_config
                self.prefetch_policy = prepared.prefetch_policy
                self.write_policy = prepared.write_policy
            status = self.storage_status()
        log.info(
            "hicache.attach",
            backend=status.backend,
            prefetch_policy=status.prefetch_policy,
            write_policy=status.write_policy,
        )
        return status

    def abort_attach(self, prepared: PreparedAttach) -> None:
        """Release a prepared backend; aborting twice is a no-op, after commit an error."""
        with self._attach_lock:
            if prepared.state == "aborted" and prepared.owner == id(self):
                return
            self._settle(prepared, "aborted")
        prepared.backend.abandon()
        log.info("hicache.attach_aborted", backend=prepared.backend_name)

    def attach_storage_backend(
        self,
        name: str,
        extra_config: Mapping[str, Any] | str | None = None,
        prefetch_policy: str | None = None,
        write_policy: str | None = None,
    ) -> StorageStatus:
        """Prepare and commit in one step; raises StorageAttachError and changes nothing on failure."""
        prepared = self.prepare_attach(name, extra_config, prefetch_policy=prefetch_policy, write_policy=write_policy)
        return self.commit_attach(prepared)

    def detach_storage_backend(self) -> bool:
        """Flush pending writes, then close the backend. Returns False when none was attached."""
        with self._attach_lock:
            if self._backend is None:
                return False
            name = self._backend_name
            self._detach_locked()
        log.info("hicache.detach", backend=name)
        return True

    def storage_status(self) -> StorageStatus:
        with self._lock:
            return StorageStatus(self._backend_name, self._extra_config, self.prefetch_policy, self.write_policy)

    @property
    def storage_backend(self) -> StorageBase | None:
        """The attached backend object, or None."""
        return self._backend

    def storage_health(self) -> dict[str, Any] | None:
        """The attached backend's own description (resolved location, authentication, degraded), or None."""
        backend = self._backend
        return None if backend is None else backend.describe()

    @property
    def stats(self) -> HiCacheStats:
        with self._lock:
            c = self._counts
            backend = self._backend
            corrupt = self._retired_corrupt + c["layout_mismatches"]
            forged = self._retired_forged
            oversized, unsafe = self._retired_oversized, self._retired_unsafe
            if backend is not None:
                bstats = backend.stats
                corrupt += bstats.corrupt_skipped
                forged += bstats.forged_skipped
                oversized += bstats.oversized_skipped
                unsafe += bstats.unsafe_skipped
            return HiCacheStats(
                backed_up_pages=c["backed_up_pages"],
                host_hits=c["host_hits"],
                storage_hits=c["storage_hits"],
                prefetched_pages=c["prefetched_pages"],
                corrupt_skipped=corrupt,
                forged_skipped=forged,
                oversized_skipped=oversized,
                unsafe_skipped=unsafe,
                read_timeouts=c["read_timeouts"],
                storage_writes=c["storage_writes"],
                write_errors=c["write_errors"],
                host_evictions=c["host_evictions"],
                host_pages=len(self.host),
                host_capacity=self.host.capacity,
                pending_writes=sum(1 for f in self._pending_writes if not f.done()),
                pending_prefetches=len(self._inflight),
                storage_backend=self._backend_name,
            )

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait for background reads and writes; returns False if some are still running."""
        with self._lock:
            pending = [*self._pending_writes, *self._inflight.values()]
        _, not_done = cf.wait(pending, timeout=timeout)
        return not not_done

    def close(self) -> None:
        """Detach (flushing) and stop the I/O threads; idempotent."""
        if self._closed:
            return
        self.detach_storage_backend()
        self._closed = True
        self._writer.shutdown(wait=True)
        self._readers.shutdown(wait=True)
        self._lookups.shutdown(wait=True)

    # -- internals ---------------------------------------------------------------------
    def _settle(self, prepared: PreparedAttach, state: str) -> None:
        if prepared.owner != id(self):
            msg = f"this prepared attach of {prepared.backend_name!r} belongs to another controller"
            raise AttachStateError(msg)
        if prepared.state != "prepared":
            msg = f"this prepared attach of {prepared.backend_name!r} was already {prepared.state} -- prepare a new one"
            raise AttachStateError(msg)
        prepared.state = state

    def _detach_locked(self) -> None:
        # caller holds _attach_lock. Store what host has that storage lacks, then
        # unhook the backend so no new I/O targets it, then let in-flight I/O land
        # before closing it (close flushes).
        self.flush()
        with self._lock:
            backend, self._backend = self._backend, None
            self._backend_name = None
            self._extra_config = None
            self.host.mark_all_unstored()
            pending = [*self._pending_writes, *self._inflight.values()]
        cf.wait(pending)
        if backend is not None:
            backend.close()
            with self._lock:
                retired = backend.stats
                self._retired_corrupt += retired.corrupt_skipped
                self._retired_forged += retired.forged_skipped
                self._retired_oversized += retired.oversized_skipped
                self._retired_unsafe += retired.unsafe_skipped

    def _saves_on_evict(self) -> bool:
        return self._backend is not None and self.write_policy == "write_back"

    def _store(self, key: str) -> None:
        # caller holds _lock; the payload is copied now, written on the writer thread
        backend = self._backend
        page = self.host.page(key)
        if backend is None or page is None:
            return
        page.stored = True
        self._submit_write(backend, key, self.host.payload(key))

    def _submit_write(self, backend: StorageBase, key: str, payload: bytes) -> None:
        fut = self._writer.submit(self._write, backend, key, payload)
        self._pending_writes.add(fut)
        fut.add_done_callback(self._write_done)

    def _write_done(self, fut: cf.Future[bool]) -> None:
        with self._lock:
            self._pending_writes.discard(fut)

    def _write(self, backend: StorageBase, key: str, payload: bytes) -> bool:
        try:
            ok = backend.put(key, payload)
        except Exception as exc:  # a backend bug must not kill the writer thread
            log.error("hicache.write_failed", key=key, error=repr(exc))
            ok = False
        with self._lock:
            if ok:
                self._counts["storage_writes"] += 1
            else:
                self._counts["write_errors"] += 1
                page = self.host.page(key)
                if page is not None and backend is self._backend:
                    page.stored = False
        return ok

    def _stored_run(self, backend: StorageBase, keys: Sequence[str]) -> int:
        """How many of `keys`, from the first, host, a running read or the backend holds.

        The backend is asked on the lookup thread and waited for at most `read_timeout_s`;
        past that the answer is 0 (a miss), counted in `read_timeouts`.
        """

        def run() -> int:
            n = 0
            for key in keys:
                with self._lock:
                    known = key in self.host or key in self._inflight
                if not (known or backend.exists(key)):
                    break
                n += 1
            return n

        try:
            fut = self._lookups.submit(run)
        except RuntimeError:  # the threads were shut down: the controller is closing
            return 0
        try:
            return fut.result(timeout=self.read_timeout_s)
        except cf.TimeoutError:
            self._count_timeout("lookup", 1)
            return 0

    def _count_timeout(self, where: str, n: int) -> None:
        with self._lock:
            self._counts["read_timeouts"] += n
            first = self._counts["read_timeouts"] == n
        log_at = log.warning if first else log.debug
        log_at("hicache.storage.read_timeout", where=where, pages=n, timeout_s=self.read_timeout_s)

    def _request_fetch(self, backend: StorageBase, key: str, protect: Sequence[str]) -> cf.Future[bool]:
        """The one in-flight read of `key`, started if none is running."""
        with self._lock:
            fut = self._inflight.get(key)
            if fut is None:
                fut = self._readers.submit(self._fetch, backend, key, protect)
                self._inflight[key] = fut
            return fut

    def _fetch(self, backend: StorageBase, key: str, protect: Sequence[str]) -> bool:
        try:
            data = backend.get(key)
        except Exception as exc:  # a backend bug must read as a miss, not a crash
            log.error("hicache.read_failed", key=key, error=repr(exc))
            data = None
        with self._lock:
            self._inflight.pop(key, None)
            if data is None:
                return False
            if key in self.host:
                return True
            slots, evicted = self.host.allocate([key], protect=protect, save_unstored=self._saves_on_evict())
            self._handle_evicted(evicted)
            if not slots:
                return False
            try:
                self.host.load_payload(slots[0], data)
            except LayoutMismatchError as exc:
                self.host.remove(key)
                self._counts["layout_mismatches"] += 1
                log.warning("hicache.layout_mismatch", key=key, reason=str(exc))
                return False
            page = self.host.page(key)
            assert page is not None
            page.stored = backend is self._backend
            self._counts["storage_hits"] += 1
            self._counts["prefetched_pages"] += 1
        return True

    def _handle_evicted(self, evicted: list[EvictedPage]) -> None:
        self._counts["host_evictions"] += len(evicted)
        if self._backend is None:
            return
        for e in evicted:
            if e.payload is not None:
                self._submit_write(self._backend, e.key, e.payload)

    def _check_start(self, start: int) -> None:
        if start < 0 or start % self.page_size:
            msg = f"start must be a non-negative multiple of the page size {self.page_size} (got {start})"
            raise ValueError(msg)
