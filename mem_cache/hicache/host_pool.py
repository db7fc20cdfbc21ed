"""HostKVPool: KV pages in host memory, addressed by page key, with LRU eviction.

Layout ("layer_first"): for every layer of the device pool, one key tensor
`[capacity, page_size, k_heads, k_dim]` and one value tensor
`[capacity, page_size, v_heads, v_dim]`; a page is one slot index across all of
them. Per-layer tensors, rather than one `[layers, 2, page, heads, dim]` block,
because hybrid models mix geometries (SWA layers, distinct v head dims). Tensors are
pinned when CUDA is available, so device copies can run asynchronously.

The pool is not thread-safe: its owner (the controller) serialises access.
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict
from collections.abc import Iterable, Sequence

import attrs
import torch

from mem_cache.hicache.errors import LayoutMismatchError
from mem_cache.hicache.layout import KVLayout


@attrs.define(slots=True)
class HostPage:
    """Bookkeeping of one resident page: where it lives and whether storage has it."""

    slot: int
    stored: bool = False  # known to be in the attached storage backend
    hits: int = 0  # loads served from this page


@attrs.frozen(slots=True)
class EvictedPage:
    """A page pushed out of the host pool; `payload` is kept only when asked for (unstored pages)."""

    key: str
    payload: bytes | None


class HostKVPool:
    """Fixed-capacity page store in host memory; see the module docstring for the layout."""

    def __init__(self, layout: KVLayout, capacity: int, *, pin_memory: bool | None = None) -> None:
        if capacity < 1:
            msg = f"host pool capacity must be at least one page (got {capacity})"
            raise ValueError(msg)
        self.layout = layout
        self.capacity = capacity
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else pin_memory
        page = layout.page_size
        dt = layout.host_dtype
        self.k: dict[int, torch.Tensor] = {}
        self.v: dict[int, torch.Tensor] = {}
        for g in layout.layers:
            self.k[g.layer_id] = torch.zeros((capacity, page, *g.k_shape), dtype=dt, pin_memory=self.pin_memory)
            self.v[g.layer_id] = torch.zeros((capacity, page, *g.v_shape), dtype=dt, pin_memory=self.pin_memory)
        # least recently used first
        self._pages: OrderedDict[str, HostPage] = OrderedDict()
        self._free = list(range(capacity - 1, -1, -1))

    # -- queries ----------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._pages)

    def __contains__(self, key: object) -> bool:
        return key in self._pages

    def page(self, key: str) -> HostPage | None:
        return self._pages.get(key)

    def prefix_length(self, keys: Sequence[str]) -> int:
        """How many of `keys`, from the first, are resident (does not touch LRU order)."""
        n = 0
        for key in keys:
            if key not in self._pages:
                break
            n += 1
        return n

    def unstored_keys(self) -> list[str]:
        """Resident pages the attached storage does not hold, least recently used first."""
        return [k for k, p in self._pages.items() if not p.stored]

    def mark_all_unstored(self) -> None:
        """Forget what storage holds (a backend was detached or swapped)."""
        for p in self._pages.values():
            p.stored = False

    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.k.values()) + sum(t.nbytes for t in self.v.values())

    # -- updates ----------------------------------------------------------------------
    def touch(self, keys: Iterable[str]) -> None:
        """Mark pages as just used. Later pages are touched first, so a prefix's head
        stays resident longest: evicting a tail page loses one page, a head page the chain.
        """
        for key in reversed(list(keys)):
            if key in self._pages:
                self._pages.move_to_end(key)

    def allocate(
        self, keys: Sequence[str], *, protect: Iterable[str] = (), save_unstored: bool = False
    ) -> tuple[list[int], list[EvictedPage]]:
        """Give each new key a slot, evicting least recently used pages as needed.

        Keys already resident keep their slot. Pages in `protect` (and in `keys`) are
        never evicted; when no slot can be found the remaining keys are left out, so the
        returned slot list may be shorter than `keys` (it covers a prefix of them).
        Evicted pages come back by key; with `save_unstored`, those storage does not
        hold also carry their payload, so a write-back caller can store them.
        """
        keep = set(protect) | set(keys)
        slots: list[int] = []
        evicted: list[EvictedPage] = []
        for key in keys:
            existing = self._pages.get(key)
            if existing is not None:
                slots.append(existing.slot)
                continue
            if not self._free:
                victim = next((k for k in self._pages if k not in keep), None)
                if victim is None:
                    break
                evicted.append(self._evict(victim, save_unstored))
            slot = self._free.pop()
            self._pages[key] = HostPage(slot)
            slots.append(slot)
        return slots, evicted

    def remove(self, key: str) -> None:
        page = self._pages.pop(key, None)
        if page is not None:
            self._free.append(page.slot)

    def _evict(self, key: str, save_unstored: bool) -> EvictedPage:
        page = self._pages[key]
        payload = self.payload(key) if save_unstored and not page.stored else None
        self.remove(key)
        return EvictedPage(key, payload)

    # -- data -------------------------------------------------------------------------
    def write(self, slots: Sequence[int], k: dict[int, torch.Tensor], v: dict[int, torch.Tensor]) -> None:
        """Copy per-layer tensors shaped `[len(slots) * page_size, heads, dim]` into `slots`."""
        idx = torch.tensor(list(slots), dtype=torch.int64)
        n = len(slots)
        for g in self.layout.layers:
            kt, vt = k[g.layer_id], v[g.layer_id]
            want_k = (n * self.layout.page_size, *g.k_shape)
            if tuple(kt.shape) != want_k or tuple(vt.shape[1:]) != g.v_shape:
                msg = f"layer {g.layer_id}: got k {tuple(kt.shape)} / v {tuple(vt.shape)}, expected k {want_k}"
                raise LayoutMismatchError(msg)
            self.k[g.layer_id][idx] = kt.reshape(n, self.layout.page_size, *g.k_shape).to("cpu")
            self.v[g.layer_id][idx] = vt.reshape(n, self.layout.page_size, *g.v_shape).to("cpu")

    def read(self, slots: Sequence[int]) -> tuple[dict[int, torch.Tensor], dict[int, torch.Tensor]]:
        """Per-layer tensors `[len(slots) * page_size, heads, dim]` for `slots` (copies)."""
        idx = torch.tensor(list(slots), dtype=torch.int64)
        k = {lid: t[idx].flatten(0, 1) for lid, t in self.k.items()}
        v = {lid: t[idx].flatten(0, 1) for lid, t in self.v.items()}
        return k, v

    def payload(self, key: str) -> bytes:
        """The page's bytes in storage order (layout.py): per layer, keys then values."""
        slot = self._pages[key].slot
        parts = []
        for g in self.layout.layers:
            parts.append(_as_bytes_view(self.k[g.layer_id][slot]))
            parts.append(_as_bytes_view(self.v[g.layer_id][slot]))
        flat = torch.cat(parts)
        # numpy is optional for torch; read the contiguous CPU buffer directly
        return ctypes.string_at(flat.data_ptr(), flat.numel())

    def load_payload(self, slot: int, payload: bytes) -> None:
        """Fill `slot` from storage bytes; raises LayoutMismatchError on a wrong length."""
        if len(payload) != self.layout.page_bytes:
            msg = f"page payload is {len(payload)} bytes, this layout needs {self.layout.page_bytes}"
            raise LayoutMismatchError(msg)
        flat = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
        off = 0
        for g in self.layout.layers:
            for dst in (self.k[g.layer_id][slot], self.v[g.layer_id][slot]):
                n = dst.numel() * dst.element_size()
                dst.copy_(flat[off : off + n].view(dst.dtype).view(dst.shape))
                off += n


def _as_bytes_view(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


__all__ = ["EvictedPage", "HostKVPool", "HostPage"]
