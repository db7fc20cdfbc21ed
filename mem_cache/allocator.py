"""Allocators: which KV slots are free, handed out by token or by page.

Contract shared by every allocator here:
- Exhaustion is not an error: `alloc*` returns None and takes nothing when the request
  does not fit, so the scheduler can evict and retry.
- Slot 0 (page 0 when paged) is never handed out: padded batch entries write there.
- `free` is all or nothing. Freeing an index outside the pool or in the reserved page
  raises ForeignIndexError; freeing one that is not allocated raises DoubleFreeError.
- Indices are int64 tensors on the allocator's device.

Every operation is a fixed number of tensor ops over the batch, never a Python loop over
tokens: free pages live in a preallocated stack tensor (alloc and free move only the
pages involved), liveness is a bool per page, and the distinct pages of a free are found
with a scatter/gather stamp instead of a sort, so a free costs O(indices), not
O(indices log indices).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Protocol

import torch

from mem_cache.errors import DoubleFreeError, ForeignIndexError
from mem_cache.pools import KVPool, SWAKVPool

IntsLike = torch.Tensor | Sequence[int]


def _as_index(values: IntsLike, device: torch.device) -> torch.Tensor:
    if isinstance(values, torch.Tensor):
        return values.to(device=device, dtype=torch.int64).reshape(-1)
    return torch.tensor(list(values), dtype=torch.int64, device=device)


def _device_of(kvcache: KVPool | None, device: str | torch.device | None) -> torch.device:
    """The device asked for, else the pool's, else the CPU."""
    if device is None:
        device = kvcache.device if kvcache is not None else "cpu"
    return torch.device(device)


class KVAllocator(Protocol):
    """What a scheduler or model runner needs from any KV allocator."""

    page_size: int

    def alloc(self, need: int) -> torch.Tensor | None: ...

    def free(self, indices: IntsLike) -> None: ...

    def available_size(self) -> int: ...

    def get_kvcache(self) -> KVPool | None: ...


def _decode_slots(last: torch.Tensor, starts: torch.Tensor, pages: torch.Tensor, page: int) -> torch.Tensor:
    """Each request's new slot: right after `last`, or the first slot of its new page."""
    out = last + 1
    out[starts] = pages * page
    return out


class _ExtendLayout:
    """Where each new token of an `alloc_extend` batch goes, independent of which pages are taken.

    Token t of the concatenated batch belongs to request r. It either continues r's partly
    used last page (slot `last[r] + 1 + j`, j its offset in r's extension) or lands at
    position `v` of the slots of the newly taken pages, in order. Both are a per-request
    base plus t, so the whole batch is one gather of per-request values. Gathers use
    index_select rather than `x[idx]`: same result, and it stays single-threaded at batch
    sizes, where intra-op threads only add wake-up latency on a busy machine.
    """

    __slots__ = ("t", "lim", "base_new", "starts", "req", "n_pages")

    def __init__(
        self, prefix: torch.Tensor, seq: torch.Tensor, ext: torch.Tensor, total: int, page: int, t: torch.Tensor
    ) -> None:
        first_new = (prefix + page - 1) // page  # first page index (in the request) that is new
        new_pages = (seq + page - 1) // page - first_new
        self.n_pages = new_pages
        self.starts = torch.cumsum(ext, 0) - ext
        in_last_page = first_new * page - prefix  # tokens that fit in the partly used last page
        self.lim = self.starts + in_last_page
        self.base_new = (torch.cumsum(new_pages, 0) - new_pages) * page - self.lim
        self.t = t  # 0..total-1
        # request of each token: +1 where each request after the first begins, summed up; empty
        # requests add at the same place and a trailing one lands in the spare last entry
        # (repeat_interleave/searchsorted give the same but go multi-threaded at these sizes)
        bumps = torch.zeros(total + 1, dtype=torch.int64, device=t.device)
        bumps.index_add_(0, self.starts[1:], torch.ones_like(self.starts[1:]))
        self.req = bumps[:total].cumsum_(0)

    def slots(self, last: torch.Tensor, pages: torch.Tensor, page: int, offsets: torch.Tensor) -> torch.Tensor:
        """The slots of every new token, given each request's last slot and the new pages."""
        t, req = self.t, self.req
        cont = (last + 1 - self.starts).index_select(0, req) + t
        if pages.numel() == 0:
            return cont
        fresh = ((pages * page).unsqueeze(1) + offsets).reshape(-1)
        # tokens of the last page get a negative virtual position here; clamped, then discarded by where()
        v = (self.base_new.index_select(0, req) + t).clamp_(min=0)
        return torch.where(t < self.lim.index_select(0, req), cont, fresh.index_select(0, v))


class PagedKVAllocator(KVAllocator):
    """What a continuous-batching scheduler needs: page-aware extend and decode on top of `KVAllocator`.

    The public calls live here, once, so every paged allocator checks its arguments
    alike, takes the page-size-1 path alike (each token is a page of its own) and frees
    all or nothing; a subclass says only how it takes pages and records what it placed
    (`_alloc_pages`, `_place_extend`, `_place_decode`, `_free`).
    """

    size: int

    def __init__(self, page_size: int, device: torch.device) -> None:
        self.page_size = page_size
        self.device = device
        self._offsets = torch.arange(page_size, dtype=torch.int64, device=self.device)
        self._iota = torch.arange(0, dtype=torch.int64, device=self.device)

    # ---- public alloc/free ---------------------------------------------------------------
    def alloc(self, need: int) -> torch.Tensor | None:
        """`need` slots (a multiple of page_size) in whole pages, or None when they do not fit."""
        if need < 0 or need % self.page_size:
            raise ValueError(f"alloc needs a non-negative multiple of page_size {self.page_size}, got {need}")
        return self._alloc_pages(need // self.page_size)

    def alloc_extend(
        self,
        prefix_lens: IntsLike,
        seq_lens: IntsLike,
        last_loc: IntsLike,
        extend_num_tokens: int | None = None,
    ) -> torch.Tensor | None:
        """Slots for tokens `prefix_lens[i] .. seq_lens[i]` of each request, concatenated.

        `last_loc[i]` is the slot of token `prefix_lens[i] - 1` (-1 when the prefix is
        empty); the rest of its page is used first, then new pages. None when the new
        pages do not fit.
        """
        prefix, seq, last, ext, total = self._extend_args(prefix_lens, seq_lens, last_loc, extend_num_tokens)
        if self.page_size == 1:  # every token is a new page
            return self._alloc_pages(total)
        layout = _ExtendLayout(prefix, seq, ext, total, self.page_size, self._positions(total))
        return self._place_extend(layout, prefix, last)

    def alloc_decode(self, seq_lens: IntsLike, last_loc: IntsLike) -> torch.Tensor | None:
        """One slot per request for token `seq_lens[i] - 1` (lengths include the new token).

        A request whose new token starts a page gets a new page; the others use
        `last_loc[i] + 1`, which must be an allocated slot (ValueError otherwise, nothing
        taken). None when the new pages do not fit.
        """
        starts = self._decode_starts(seq_lens)
        if self.page_size == 1:
            return self._alloc_pages(starts.numel())
        return self._place_decode(starts, _as_index(last_loc, self.device))

    def free(self, indices: IntsLike) -> None:
        """Free the pages holding `indices`; all or nothing (see module docstring for errors)."""
        idx = _as_index(indices, self.device)
        if idx.numel():
            self._free(idx)

    # ---- what a subclass places ----------------------------------------------------------
    @abc.abstractmethod
    def _alloc_pages(self, n: int) -> torch.Tensor | None:
        """The slots of n new whole pages (with page_size 1, n slots), or None with nothing taken."""

    @abc.abstractmethod
    def _place_extend(self, layout: _ExtendLayout, prefix: torch.Tensor, last: torch.Tensor) -> torch.Tensor | None:
        """The slots `layout` describes, after each request's `last` slot (page_size > 1)."""

    @abc.abstractmethod
    def _place_decode(self, starts: torch.Tensor, last: torch.Tensor) -> torch.Tensor | None:
        """One slot per request: a new page where `starts`, else right after `last` (page_size > 1)."""

    @abc.abstractmethod
    def _free(self, indices: torch.Tensor) -> None:
        """Free the pages holding `indices` (not empty), after checking every one of them."""

    # ---- argument checks and arithmetic shared by every paged allocator ------------------
    def _positions(self, n: int) -> torch.Tensor:
        """0..n-1 from a cached arange that grows geometrically, so hot paths never build one."""
        if n > self._iota.numel():
            self._iota = torch.arange(max(n, 2 * self._iota.numel(), 1024), dtype=torch.int64, device=self.device)
        return self._iota[:n]

    def _slots_of(self, pages: torch.Tensor) -> torch.Tensor:
        if self.page_size == 1:
            return pages.clone()  # never hand out a view of the stack
        return ((pages * self.page_size).unsqueeze(1) + self._offsets).reshape(-1)

    def _extend_args(
        self, prefix_lens: IntsLike, seq_lens: IntsLike, last_loc: IntsLike, extend_num_tokens: int | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int]:
        dev, page = self.device, self.page_size
        prefix = _as_index(prefix_lens, dev)
        seq = _as_index(seq_lens, dev)
        last = _as_index(last_loc, dev)
        ext = seq - prefix
        if bool(((ext < 0) | (prefix < 0)).any()):
            raise ValueError("alloc_extend needs 0 <= prefix_lens <= seq_lens for every request")
        total = int(ext.sum())
        if extend_num_tokens is not None and extend_num_tokens != total:
            raise ValueError(f"extend_num_tokens {extend_num_tokens} != sum(seq_lens - prefix_lens) {total}")
        if page > 1:
            # last_loc matters only where the last page is partly used; check it points there
            partial = prefix % page != 0
            if bool((partial & ((last < page) | (last % page != (prefix - 1) % page))).any()):
                raise ValueError("last_loc must be the slot of token prefix_len - 1 (its offset in the page disagrees)")
        return prefix, seq, last, ext, total

    def _decode_starts(self, seq_lens: IntsLike) -> torch.Tensor:
        """Bool per request: does its new token start a page (all True when page_size is 1)."""
        seq = _as_index(seq_lens, self.device)
        if bool((seq < 1).any()):
            raise ValueError("alloc_decode needs seq_lens >= 1 (lengths include the new token)")
        return (seq - 1) % self.page_size == 0

    def _check_decode_slots(self, out: torch.Tensor, last: torch.Tensor, *, side: str = "") -> None:
        """A continuing request whose last slot is not allocated would land in the reserved page."""
        bad = out < self.page_size
        if bool(bad.any()):
            i = int(bad.nonzero()[0])
            raise ValueError(
                f"alloc_decode: request {i} continues a page from {side}slot {int(last[i])}, which is not an "
                f"allocated slot -- pass the slot of each request's last token as last_loc"
            )


class PagedTokenToKVPoolAllocator(PagedKVAllocator):
    """Hands out KV slots a page at a time; `size` usable slots in pages 1..size // page_size.

    `alloc(need)` needs a multiple of page_size and returns the slots of whole pages.
    `alloc_extend` / `alloc_decode` place new tokens after each request's last slot,
    filling its partly used last page before taking new pages. Every alloc returns None
    when the pages do not fit (nothing taken). `free(indices)` frees the pages holding
    `indices`; see the module docstring for the errors it raises.
    """

    def __init__(
        self,
        size: int,
        page_size: int = 1,
        kvcache: KVPool | None = None,
        device: str | torch.device | None = None,
    ) -> None:
        if page_size < 1 or size < page_size:
            raise ValueError(
                f"allocator needs page_size >= 1 and size >= page_size (got size {size}, page_size {page_size})"
            )
        super().__init__(page_size, _device_of(kvcache, device))
        self.num_pages = size // page_size
        self.size = self.num_pages * page_size
        self._kvcache = kvcache
        # scratch for finding the distinct pages of a free (see _pages_to_free)
        self._stamp = torch.empty(self.num_pages + 2, dtype=torch.int64, device=self.device)
        self.clear()

    # ---- state -------------------------------------------------------------------------
    def clear(self) -> None:
        """Free everything: every page but page 0 becomes available."""
        # free pages are _stack[_bottom:]; alloc takes from the front, so a fresh allocator
        # hands out pages 1, 2, ... in order, and free pushes pages back in front
        self._stack = torch.arange(1, self.num_pages + 1, dtype=torch.int64, device=self.device)
        self._bottom = 0
        # one entry per page plus one past the end that is never live: clamping any index
        # onto 0 or num_pages + 1 makes "outside the pool" read as "not allocated" in one gather
        self._live = torch.zeros(self.num_pages + 2, dtype=torch.bool, device=self.device)

    def available_size(self) -> int:
        """Free slots (whole free pages times page_size)."""
        return (self.num_pages - self._bottom) * self.page_size

    def get_kvcache(self) -> KVPool | None:
        return self._kvcache

    def is_live(self, indices: IntsLike) -> torch.Tensor:
        """Bool per index: is the slot's page currently allocated (False outside the pool)."""
        idx = _as_index(indices, self.device)
        return self._live[(idx // self.page_size).clamp(0, self.num_pages + 1)]

    # ---- pages ---------------------------------------------------------------------------
    def _free_pages(self) -> int:
        return self.num_pages - self._bottom

    def _take_pages(self, n: int) -> torch.Tensor | None:
        """n free pages, or None; the result is a view of the stack, valid until the next release."""
        b = self._bottom
        if n > self.num_pages - b:
            return None
        pages = self._stack[b : b + n]
        self._bottom = b + n
        self._live[pages] = True
        return pages

    def _pages_to_free(self, indices: torch.Tensor) -> torch.Tensor:
        """The distinct pages holding `indices`, after checking they are ours and allocated."""
        page = self.page_size
        pages = indices // page if page > 1 else indices
        if not bool(self._live.index_select(0, pages.clamp(0, self.num_pages + 1)).all()):
            self._raise_bad_free(indices, pages)
        # distinct pages without a sort: each index writes its position into its page's
        # stamp; exactly one writer per page wins, and it is the one that reads itself back
        pos = self._positions(pages.numel())
        self._stamp.scatter_(0, pages, pos)
        first = self._stamp.index_select(0, pages) == pos
        if page > 1:
            return pages.masked_select(first)
        if not bool(first.all()):
            raise DoubleFreeError(f"slot {int(pages[~first][0])} is freed twice in one call")
        return pages

    def _raise_bad_free(self, indices: torch.Tensor, pages: torch.Tensor) -> None:
        page = self.page_size
        foreign = (indices < page) | (pages > self.num_pages)
        if bool(foreign.any()):
            first = int(indices[foreign][0])
            raise ForeignIndexError(
                f"slot {first} is not in this allocator (slots {page}..{self.size + page - 1}; page 0 is reserved)"
            )
        first = int(pages[~self._live[pages]][0])
        raise DoubleFreeError(
            f"slot {first * page} is not allocated -- it was freed already or never handed out"
            if page == 1
            else (
                f"page {first} (slots {first * page}..{first * page + page - 1}) is not allocated "
                "-- it was freed already or never handed out"
            )
        )

    def _release_pages(self, pages: torch.Tensor) -> None:
        n = int(pages.numel())
        if n == 0:
            return
        b = self._bottom - n
        self._live[pages] = False
        self._stack[b : self._bottom] = pages
        self._bottom = b

    # ---- placing ------------------------------------------------------------------------
    def _alloc_pages(self, n: int) -> torch.Tensor | None:
        pages = self._take_pages(n)
        return None if pages is None else self._slots_of(pages)

    def _place_extend(self, layout: _ExtendLayout, prefix: torch.Tensor, last: torch.Tensor) -> torch.Tensor | None:
        pages = self._take_pages(int(layout.n_pages.sum()))
        if pages is None:
            return None
        return layout.slots(last, pages, self.page_size, self._offsets)

    def _place_decode(self, starts: torch.Tensor, last: torch.Tensor) -> torch.Tensor | None:
        pages = self._take_pages(int(starts.sum()))
        if pages is None:
            return None
        out = _decode_slots(last, starts, pages, self.page_size)
        try:
            self._check_decode_slots(out, last)
        except ValueError:
            self._release_pages(pages)
            raise
        return out

    def _free(self, indices: torch.Tensor) -> None:
        self._release_pages(self._pages_to_free(indices))


class TokenToKVPoolAllocator(PagedTokenToKVPoolAllocator):
    """Hands out single KV slots 1..size (page size 1); `alloc(need)` returns None when full.

    Freeing a slot twice (also twice in one call) raises DoubleFreeError.
    """

    def __init__(self, size: int, kvcache: KVPool | None = None, device: str | torch.device | None = None) -> None:
        super().__init__(size, 1, kvcache, device)


class SWATokenToKVPoolAllocator(PagedKVAllocator):
    """Allocates every token on both sides: a full slot and a sliding-window slot.

    Returns full slots; the SWA slot of each is written to `full_to_swa_index_mapping`
    (the SWA pool's map when a pool is given). `free` frees both sides and clears the
    map; `free_swa` frees only the SWA side of tokens that left the window (idempotent:
    tokens already out of the window are skipped). With page_size > 1 both sides work in
    whole pages and a full page maps onto one SWA page, slot offsets kept, so page-level
    work never expands to slots. `available_size` is the smaller side. Exhaustion returns
    None and takes nothing on either side. `last_loc` is a full slot; a request continuing
    a page whose SWA side was freed (free_swa) raises ValueError.
    """

    def __init__(
        self,
        size: int,
        size_swa: int,
        page_size: int = 1,
        kvcache: SWAKVPool | None = None,
        device: str | torch.device | None = None,
    ) -> None:
        dev = _device_of(kvcache, device)
        self.full_attn_allocator = PagedTokenToKVPoolAllocator(size, page_size, None, dev)
        self.swa_attn_allocator = PagedTokenToKVPoolAllocator(size_swa, page_size, None, dev)
        super().__init__(page_size, dev)
        self._kvcache = kvcache
        self.size = self.full_attn_allocator.size
        self.size_swa = self.swa_attn_allocator.size
        if kvcache is not None:
            expected = self.size + page_size + 1
            if kvcache.full_to_swa_index_mapping.numel() != expected or kvcache.identity_map:
                raise ValueError(
                    f"the SWA pool's index map has {kvcache.full_to_swa_index_mapping.numel()} entries"
                    f"{' and is an identity map' if kvcache.identity_map else ''}; this allocator needs {expected} "
                    f"(full size {self.size} + page {page_size} + 1) -- build the pool with size {self.size}, identity_map=False"
                )
            self.full_to_swa_index_mapping = kvcache.full_to_swa_index_mapping
        else:
            self.full_to_swa_index_mapping = torch.zeros(
                self.size + page_size + 1, dtype=torch.int64, device=self.device
            )
        # the map without its -1 tail, one row per full page: page-level reads and clears
        self._page_map = self.full_to_swa_index_mapping[:-1].view(-1, page_size)
        self.clear()

    @property
    def size_full(self) -> int:
        return self.size

    def clear(self) -> None:
        self.full_attn_allocator.clear()
        self.swa_attn_allocator.clear()
        self.full_to_swa_index_mapping.zero_()
        self.full_to_swa_index_mapping[-1] = -1

    def available_size(self) -> int:
        return min(self.full_available_size(), self.swa_available_size())

    def full_available_size(self) -> int:
        return self.full_attn_allocator.available_size()

    def swa_available_size(self) -> int:
        return self.swa_attn_allocator.available_size()

    def get_kvcache(self) -> SWAKVPool | None:
        return self._kvcache

    def is_live(self, indices: IntsLike) -> torch.Tensor:
        return self.full_attn_allocator.is_live(indices)

    def translate_loc_from_full_to_swa(self, loc: torch.Tensor) -> torch.Tensor:
        return self.full_to_swa_index_mapping[loc.to(torch.int64)]

    def _take_both(self, n: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """n pages on each side, or None (nothing taken) when either side is short."""
        full, swa = self.full_attn_allocator, self.swa_attn_allocator
        if n > full._free_pages() or n > swa._free_pages():
            return None
        full_pages, swa_pages = full._take_pages(n), swa._take_pages(n)
        assert full_pages is not None and swa_pages is not None
        return full_pages, swa_pages

    def _release_both(self, full_pages: torch.Tensor, swa_pages: torch.Tensor) -> None:
        self.swa_attn_allocator._release_pages(swa_pages)
        self.full_attn_allocator._release_pages(full_pages)

    # ---- placing: both sides, paired in the map ------------------------------------------
    def _alloc_pages(self, n: int) -> torch.Tensor | None:
        taken = self._take_both(n)
        if taken is None:
            return None
        full_pages, swa_pages = taken
        # index_copy_/index_fill_ on rows, not `map2d[rows] = ...`: the latter is a generic index_put
        # whose intra-op threading costs milliseconds on a busy machine
        self._page_map.index_copy_(0, full_pages, (swa_pages * self.page_size).unsqueeze(1) + self._offsets)
        return self._slots_of(full_pages)

    def _place_extend(self, layout: _ExtendLayout, prefix: torch.Tensor, last: torch.Tensor) -> torch.Tensor | None:
        page = self.page_size
        swa_last = self.translate_loc_from_full_to_swa(last)
        if bool(((prefix % page != 0) & (swa_last < page)).any()):
            raise ValueError(
                "alloc_extend: a request continues a page whose sliding-window side was freed -- "
                "free_swa only pages before the one holding a request's last token"
            )
        taken = self._take_both(int(layout.n_pages.sum()))
        if taken is None:
            return None
        full_pages, swa_pages = taken
        out = layout.slots(last, full_pages, page, self._offsets)
        self.full_to_swa_index_mapping[out] = layout.slots(swa_last, swa_pages, page, self._offsets)
        return out

    def _place_decode(self, starts: torch.Tensor, last: torch.Tensor) -> torch.Tensor | None:
        page = self.page_size
        taken = self._take_both(int(starts.sum()))
        if taken is None:
            return None
        full_pages, swa_pages = taken
        out = _decode_slots(last, starts, full_pages, page)
        swa_last = self.translate_loc_from_full_to_swa(last)
        swa_out = _decode_slots(swa_last, starts, swa_pages, page)
        try:
            self._check_decode_slots(out, last)
            self._check_decode_slots(swa_out, swa_last, side="sliding-window ")
        except ValueError:
            self._release_both(full_pages, swa_pages)
            raise
        self.full_to_swa_index_mapping[out] = swa_out
        return out

    def _free(self, indices: torch.Tensor) -> None:
        """Free full slots `indices` (whole pages) and their SWA slots; clears their map entries."""
        full_pages = self.full_attn_allocator._pages_to_free(indices)
        self._drop_swa_side(full_pages)
        self.full_attn_allocator._release_pages(full_pages)

    def _drop_swa_side(self, full_pages: torch.Tensor) -> None:
        """Free the SWA pages mapped from `full_pages` (skipping ones already freed) and clear their rows."""
        swa_first = self._page_map[full_pages, 0]
        mapped = swa_first > 0
        swa_pages = swa_first[mapped] if self.page_size == 1 else swa_first[mapped] // self.page_size
        self.swa_attn_allocator._release_pages(swa_pages)
        self._page_map.index_fill_(0, full_pages, 0)

    def free_swa(self, indices: IntsLike) -> None:
        """Free only the SWA side of full slots `indices` (whole pages); the full slots stay live."""
        idx = _as_index(indices, self.device)
        if idx.numel() == 0:
            return
        self._drop_swa_side(self.full_attn_allocator._pages_to_free(idx))  # checks the slots are live full slots


__all__ = [
    "KVAllocator",
    "PagedKVAllocator",
    "PagedTokenToKVPoolAllocator",
    "SWATokenToKVPoolAllocator",
    "TokenToKVPoolAllocator",
]
