"""The scheduler's KV bookkeeping: allocating with eviction, freeing, releasing SWA slots behind the window, retracting.

A mixin of `engine.scheduler.Scheduler`, run on the scheduler thread only. A request's
invariant between steps is the scheduler's: KV is held for `kv_len` tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog
import torch

from engine.request_state import Req

log = structlog.get_logger("engine.scheduler")


class SchedulerMemory:
    """Memory operations of the scheduler (see the module docstring)."""

    allocator: Any
    req_pool: Any
    cache: Any
    hicache: Any
    window: int | None
    waiting: Any
    prefilling: list[Req]
    decoding: list[Req]
    counters: Any
    speculative: Any
    limits: Any

    def alloc_with_eviction(self, alloc: Callable[[], torch.Tensor | None], need: int) -> torch.Tensor | None:
        """Run `alloc`; while it does not fit and cached pages can go, evict some and retry.

        One round may not be enough: evicted pages whose SWA slots were already
        released free nothing on the SWA side.
        """
        out = alloc()
        while out is None and self.cache is not None and self.cache.evictable_tokens():
            self.cache.evict(max(need, self.limits.page_size))
            out = alloc()
        if out is None and self.window is not None:
            # last resort before retracting: cached pages and prompts give up SWA K/V nobody reads
            released = [
                self._release_swa_behind_window(r, keep_prompt=False) for r in [*self.prefilling, *self.decoding]
            ]
            if self.cache is not None and self.cache.release_swa(max(need, self.limits.page_size)):
                released.append(True)
            if any(released):
                out = alloc()
        return out

    def last_loc(self, req: Req) -> int:
        return int(self.req_pool.req_to_token[req.row, req.kv_len - 1]) if req.kv_len else -1

    def slots_of(self, req: Req, start: int, end: int) -> torch.Tensor:
        return self.req_pool.req_to_token[req.row, start:end].to(torch.int64)

    def slot_list(self, req: Req, start: int, end: int) -> list[int]:
        """`slots_of` as plain ints, for the prefix cache and a batched free (no int64 copy on the way)."""
        return self.req_pool.req_to_token[req.row, start:end].tolist()  # type: ignore[no-any-return]

    def free_tail(self, req: Req, keep: int, end: int) -> None:
        """Free the pages of positions `keep .. end` that hold no position below `keep`."""
        page = self.limits.page_size
        start = max(-(-keep // page) * page, req.matched_len)
        if end > start:
            self.allocator.free(self.slots_of(req, start, end))

    def _seen_len(self, req: Req) -> int:
        """Tokens whose K/V both models hold (the draft may lag the target by a step)."""
        return min(req.kv_len, req.draft_kv_len) if self.speculative is not None else req.kv_len

    def _release_swa_behind_window(self, req: Req, *, keep_prompt: bool = True) -> bool:
        """Free the SWA slots of the request's own whole pages that no future query reads.

        With a prefix cache the prompt's pages keep theirs while the SWA pool has room
        (`keep_prompt`), so the same prompt can be reused whole. The bound keeps one page
        more than the window so the cached path ends on a boundary `PrefixCache.match`
        accepts. Returns whether anything was freed.
        """
        assert self.window is not None
        page = self.limits.page_size
        # the next query sits at position >= seen and reads keys after seen - window
        end = (self._seen_len(req) - self.window - page + 1) // page * page
        low = req.matched_len
        if keep_prompt and self.cache is not None:
            low = max(low, len(req.prompt) // page * page)
        a, b = req.swa_gap
        if b <= a:  # nothing released yet
            a = b = low
        todo = [(s, e) for s, e in ((low, min(a, end)), (max(b, low), end)) if e > s]
        for s, e in todo:
            slots = self.slots_of(req, s, e)
            if self.hicache is not None:
                # the host copy must be taken while the page's SWA K/V is still there
                self.hicache.backup_pages(req.all_ids[:e], slots, s)
            self.allocator.free_swa(slots)  # type: ignore[attr-defined]  # swa_window() is set only when it exists
        if todo:
            req.swa_gap = (min(a, todo[0][0]), max(b, todo[-1][1]))
        return bool(todo)

    def _release(self, req: Req, *, cache: bool, frees: list[int] | None = None) -> None:
        """Give the request's KV to the prefix cache (or free it), unlock its prefix, free its row.

        With `frees`, the slots to free are appended to it for one allocator call over many
        requests (`release_all`) instead of being freed here.
        """
        assert req.row is not None
        keep = self._seen_len(req)
        gone: list[int] = []
        if self.cache is not None and cache:
            slots = self.slot_list(req, 0, req.kv_len)
            spare = self.cache.insert(req.all_ids[:keep], slots[:keep], swa_gap=req.swa_gap)
            tail = slots[keep:]
            if spare or tail:
                gone = sorted(set(spare) | set(tail))
            if self.hicache is not None:
                self.hicache.backup_prefix(req.all_ids[:keep], self)
        elif req.kv_len > req.matched_len:
            gone = self.slot_list(req, req.matched_len, req.kv_len)
        if gone:
            if frees is None:
                self.allocator.free(torch.tensor(gone, dtype=torch.int64))
            else:
                frees.extend(gone)
        if self.cache is not None and req.node is not None:
            self.cache.unlock(req.node)
        req.node = None
        self.req_pool.free(req.row)
        req.row = None
        req.kv_len = req.draft_kv_len = req.matched_len = 0
        req.swa_gap = (0, 0)

    def release_all(self, reqs: list[Req], cache: Callable[[Req], bool]) -> None:
        """`_release` each of `reqs`, freeing all their slots in one allocator call (requests own disjoint pages)."""
        frees: list[int] = []
        for req in reqs:
            self._release(req, cache=cache(req), frees=frees)
        if frees:
            self.allocator.free(torch.tensor(frees, dtype=torch.int64))

    def _retract_newest(self) -> bool:
        """Free the newest decoding request's KV and requeue it first; False when none can go."""
        if len(self.decoding) <= 1:
            return False
        req = self.decoding.pop()
        self._release(req, cache=False)
        req.retractions += 1
        self.counters["retractions"] += 1
        self.waiting.appendleft(req)
        log.info("scheduler.retract", rid=req.rid, tokens=len(req.all_ids))
        return True


__all__ = ["SchedulerMemory"]
