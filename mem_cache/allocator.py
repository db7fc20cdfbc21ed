"""Allocators: which KV slots are free, handed out by token or by page.

Contract shared by every allocator here:
- Exhaustion is not an error: `alloc*` returns None and takes nothing when the request
  does not fit, so the scheduler can evict and retry.
- Slot 0 (page 0 when paged) is never handed out: padded batch entries write there.
- `free` is all or nothing. Freeing an index outside the pool or in the reserved page
  raises ForeignIndexError; freeing one that is not allocated raises DoubleFreeError.
- Indices are int64 tensors on the allocator's device.

Free pages live in a preallocated stack tensor, so alloc and free cost O(pages moved),
never a copy of the whole free list.
"""

from __future__ import annotations

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


class KVAllocator(Protocol):
    """What a scheduler or model runner needs from any KV allocator."""

    page_size: int

    def alloc(self, need: int) -> torch.Tensor | None: ...

    def free(self, indices: IntsLike) -> None: ...

    def available_size(self) -> int: ...

    def get_kvcache(self) -> KVPool | None: ...


class PagedTokenToKVPoolAllocator:
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
            raise ValueError(f"allocator needs page_size >= 1 and size >= page_size (got size {size}, page_size {page_size})")
        self.page_size = page_size
        self.num_pages = size // page_size
        self.size = self.num_pages * page_size
        self._kvcache = kvcache
        if device is None:
            device = kvcache.device if kvcache is not None else "cpu"
        self.device = torch.device(device)
        self.clear()

    # ---- state -------------------------------------------------------------------------
    def clear(self) -> None:
        """Free everything: every page but page 0 becomes available."""
        # the stack's top is its end; pages are stored descending so the first alloc gets 1, 2, ...
        self._stack = torch.arange(self.num_pages, 0, -1, dtype=torch.int64, device=self.device)
        self._top = self.num_pages
        self._live = torch.zeros(self.num_pages + 1, dtype=torch.bool, device=self.device)

    def available_size(self) -> int:
        """Free slots (whole free pages times page_size)."""
        return self._top * self.page_size

    def get_kvcache(self) -> KVPool | None:
        return self._kvcache

    def is_live(self, indices: IntsLike) -> torch.Tensor:
        """Bool per index: is the slot's page currently allocated (False outside the pool)."""
        idx = _as_index(indices, self.device)
        pages = idx // self.page_size
        inside = (pages >= 1) & (pages <= self.num_pages)
        return inside & self._live[pages.clamp(0, self.num_pages)]

    # ---- pages ---------------------------------------------------------------------------
    def _take_pages(self, n: int) -> torch.Tensor | None:
        if n > self._top:
            return None
        pages = self._stack[self._top - n : self._top].flip(0)
        self._top -= n
        self._live[pages] = True
        return pages

    def _pages_to_free(self, indices: torch.Tensor) -> torch.Tensor:
        """The distinct pages holding `indices`, after checking they are ours and allocated."""
        page = self.page_size
        pages = indices // page
        bad = (indices < page) | (pages > self.num_pages)
        if bool(bad.any()):
            first = int(indices[bad][0])
            raise ForeignIndexError(
                f"slot {first} is not in this allocator (slots {page}..{self.size + page - 1}; page 0 is reserved)"
            )
        if page == 1:
            uniq, counts = torch.unique(pages, return_counts=True)
            if bool((counts > 1).any()):
                raise DoubleFreeError(f"slot {int(uniq[counts > 1][0])} is freed twice in one call")
            pages = uniq
        else:
            pages = torch.unique(pages)
        dead = ~self._live[pages]
        if bool(dead.any()):
            first = int(pages[dead][0])
            raise DoubleFreeError(
                f"slot {first * page} is not allocated -- it was freed already or never handed out"
                if page == 1
                else f"page {first} (slots {first * page}..{first * page + page - 1}) is not allocated -- it was freed already or never handed out"
            )
        return pages

    def _release_pages(self, pages: torch.Tensor) -> None:
        n = int(pages.numel())
        self._live[pages] = False
        self._stack[self._top : self._top + n] = pages
        self._top += n

    def _slots_of(self, pages: torch.Tensor) -> torch.Tensor:
        offsets = torch.arange(self.page_size, dtype=torch.int64, device=self.device)
        return (pages.unsqueeze(1) * self.page_size + offsets).reshape(-1)

    # ---- public alloc/free ---------------------------------------------------------------
    def alloc(self, need: int) -> torch.Tensor | None:
        """`need` slots (a multiple of page_size) in whole pages, or None when they do not fit."""
        if need < 0 or need % self.page_size:
            raise ValueError(f"alloc needs a non-negative multiple of page_size {self.page_size}, got {need}")
        pages = self._take_pages(need // self.page_size)
        return None if pages is None else self._slots_of(pages)

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
        dev, page = self.device, self.page_size
        prefix = _as_index(prefix_lens, dev)
        seq = _as_index(seq_lens, dev)
        last = _as_index(last_loc, dev)
        ext = seq - prefix
        if bool((ext < 0).any()) or bool((prefix < 0).any()):
            raise ValueError("alloc_extend needs 0 <= prefix_lens <= seq_lens for every request")
        total = int(ext.sum())
        if extend_num_tokens is not None and extend_num_tokens != total:
            raise ValueError(f"extend_num_tokens {extend_num_tokens} != sum(seq_lens - prefix_lens) {total}")
        # last_loc matters only where the last page is partly used; check it points there
        partial = prefix % page != 0
        if bool((partial & ((last < page) | (last % page != (prefix - 1) % page))).any()):
            raise ValueError("last_loc must be the slot of token prefix_len - 1 (its offset in the page disagrees)")
        aligned = (prefix + page - 1) // page * page
        new_pages = (seq + page - 1) // page - aligned // page
        pages = self._take_pages(int(new_pages.sum()))
        if pages is None:
            return None
        if total == 0:
            return torch.empty(0, dtype=torch.int64, device=dev)
        req = torch.repeat_interleave(torch.arange(len(ext), device=dev), ext)
        starts = torch.cumsum(ext, 0) - ext
        pos = torch.arange(total, device=dev) - starts[req] + prefix[req]
        rel = pos - aligned[req]
        in_last_page = rel < 0
        out = last[req] + 1 + (pos - prefix[req])
        if pages.numel():
            page_idx = (torch.cumsum(new_pages, 0) - new_pages)[req] + rel.clamp(min=0) // page
            fresh = pages[page_idx.clamp(max=pages.numel() - 1)] * page + rel.clamp(min=0) % page
            out = torch.where(in_last_page, out, fresh)
        return out

    def alloc_decode(self, seq_lens: IntsLike, last_loc: IntsLike) -> torch.Tensor | None:
        """One slot per request for token `seq_lens[i] - 1` (lengths include the new token).

        A request whose new token starts a page gets a new page; the others use
        `last_loc[i] + 1`. None when the new pages do not fit.
        """
        dev, page = self.device, self.page_size
        seq = _as_index(seq_lens, dev)
        last = _as_index(last_loc, dev)
        if bool((seq < 1).any()):
            raise ValueError("alloc_decode needs seq_lens >= 1 (lengths include the new token)")
        starts_page = (seq - 1) % page == 0
        pages = self._take_pages(int(starts_page.sum()))
        if pages is None:
            return None
        out = last + 1
        out[starts_page] = pages * page
        return out

    def free(self, indices: IntsLike) -> None:
        """Free the pages holding `indices`; all or nothing (see module docstring for errors)."""
        idx = _as_index(indices, self.device)
        if idx.numel() == 0:
            return
        self._release_pages(self._pages_to_free(idx))


class TokenToKVPoolAllocator(PagedTokenToKVPoolAllocator):
    """Hands out single KV slots 1..size (page size 1); `alloc(need)` returns None when full.

    Freeing a slot twice (also twice in one call) raises DoubleFreeError.
    """

    def __init__(self, size: int, kvcache: KVPool | None = None, device: str | torch.device | None = None) -> None:
        super().__init__(size, 1, kvcache, device)


class SWATokenToKVPoolAllocator:
    """Allocates every token on both sides: a full slot and a sliding-window slot.

    Returns full slots; the SWA slot of each is written to `full_to_swa_index_mapping`
    (the SWA pool's map when a pool is given). `free` frees both sides and clears the
    map; `free_swa` frees only the SWA side of tokens that left the window (idempotent:
    tokens already out of the window are skipped). With page_size > 1 both sides work in
    whole pages and a full page maps onto one SWA page. `available_size` is the smaller
    side. Exhaustion returns None and takes nothing on either side.
    """

    def __init__(
        self,
        size: int,
        size_swa: int,
        page_size: int = 1,
        kvcache: SWAKVPool | None = None,
        device: str | torch.device | None = None,
    ) -> None:
        if device is None:
            device = kvcache.device if kvcache is not None else "cpu"
        self.device = torch.device(device)
        self.page_size = page_size
        self._kvcache = kvcache
        self.full_attn_allocator = PagedTokenToKVPoolAllocator(size, page_size, None, self.device)
        self.swa_attn_allocator = PagedTokenToKVPoolAllocator(size_swa, page_size, None, self.device)
        self.size = self.full_attn_allocator.size
        self.size_swa = self.swa_attn_allocator.size
        if kvcache is not None:
            expected = self.size + page_size + 1
            if kvcache.full_to_swa_index_mapping.numel() != expected or kvcache.identity_map:
                raise ValueError("the SWA pool's index map does not match this allocator's full size (or is an identity map)")
            self.full_to_swa_index_mapping = kvcache.full_to_swa_index_mapping
        else:
            self.full_to_swa_index_mapping = torch.zeros(self.size + page_size + 1, dtype=torch.int64, device=self.device)
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

    def _pair(self, full: torch.Tensor | None, swa: torch.Tensor | None) -> torch.Tensor | None:
        if full is None:
            if swa is not None:
                self.swa_attn_allocator.free(swa)
            return None
        if swa is None:
            self.full_attn_allocator.free(full)
            return None
        self.full_to_swa_index_mapping[full] = swa
        return full

    def alloc(self, need: int) -> torch.Tensor | None:
        """`need` full slots, each paired with an SWA slot; None when either side is short."""
        if need > self.available_size():
            return None
        return self._pair(self.full_attn_allocator.alloc(need), self.swa_attn_allocator.alloc(need))

    def alloc_extend(
        self,
        prefix_lens: IntsLike,
        seq_lens: IntsLike,
        last_loc: IntsLike,
        extend_num_tokens: int | None = None,
    ) -> torch.Tensor | None:
        """Like PagedTokenToKVPoolAllocator.alloc_extend, on both sides; `last_loc` is a full slot."""
        last = _as_index(last_loc, self.device)
        full = self.full_attn_allocator.alloc_extend(prefix_lens, seq_lens, last, extend_num_tokens)
        if full is None:
            return None
        try:
            swa = self.swa_attn_allocator.alloc_extend(prefix_lens, seq_lens, self.translate_loc_from_full_to_swa(last))
        except ValueError:
            self.full_attn_allocator.free(full)
            raise
        return self._pair(full, swa)

    def alloc_decode(self, seq_lens: IntsLike, last_loc: IntsLike) -> torch.Tensor | None:
        """Like PagedTokenToKVPoolAllocator.alloc_decode, on both sides; `last_loc` is a full slot."""
        last = _as_index(last_loc, self.device)
        full = self.full_attn_allocator.alloc_decode(seq_lens, last)
        if full is None:
            return None
        swa = self.swa_attn_allocator.alloc_decode(seq_lens, self.translate_loc_from_full_to_swa(last))
        return self._pair(full, swa)

    def _swa_pages_of(self, full_pages: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        slots = self.full_attn_allocator._slots_of(full_pages)
        swa = self.full_to_swa_index_mapping[slots]
        swa = swa[swa > 0]
        return slots, torch.unique(swa // self.page_size)

    def free(self, indices: IntsLike) -> None:
        """Free full slots `indices` (whole pages) and their SWA slots; clears their map entries."""
        idx = _as_index(indices, self.device)
        if idx.numel() == 0:
            return
        full_pages = self.full_attn_allocator._pages_to_free(idx)
        slots, swa_pages = self._swa_pages_of(full_pages)
        self.swa_attn_allocator._release_pages(swa_pages)
        self.full_to_swa_index_mapping[slots] = 0
        self.full_attn_allocator._release_pages(full_pages)

    def free_swa(self, indices: IntsLike) -> None:
        """Free only the SWA side of full slots `indices` (whole pages); the full slots stay live."""
        idx = _as_index(indices, self.device)
        if idx.numel() == 0:
            return
        full = self.full_attn_allocator
        full_pages = full._pages_to_free(idx)  # checks the slots are live full slots
        slots, swa_pages = self._swa_pages_of(full_pages)
        self.swa_attn_allocator._release_pages(swa_pages)
        self.full_to_swa_index_mapping[slots] = 0


__all__ = [
    "KVAllocator",
    "PagedTokenToKVPoolAllocator",
    "SWATokenToKVPoolAllocator",
    "TokenToKVPoolAllocator",
]
