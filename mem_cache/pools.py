"""Device memory pools: the request-to-token table and the KV caches.

Pools own tensors and nothing else: which slots are free is the allocators' business
(allocator.py). Every KV pool is addressed by *global* layer id, so a pipeline stage that
holds layers 12..23 asks for layer 12, never for a local index.

Slot 0 of every KV pool (page 0 when paged) and row 0 of the request table are reserved:
padded batch entries write there, so they must never hold live data.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from mem_cache.errors import DoubleFreeError, ForeignIndexError
from sgconf.errors import FieldValueError

FP8_DTYPES = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


def torch_dtype(dtype: torch.dtype | str) -> torch.dtype:
    """A torch dtype from a torch dtype or a config name (`bfloat16`, `fp8_e4m3`)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in FP8_DTYPES:
        return FP8_DTYPES[dtype]
    found = getattr(torch, str(dtype), None)
    if not isinstance(found, torch.dtype):
        raise FieldValueError(
            f"unknown KV cache dtype '{dtype}' -- use float16, bfloat16, float32, fp8_e4m3 or fp8_e5m2"
        )
    return found


def _store_dtype(dtype: torch.dtype) -> torch.dtype:
    # fp8 tensors do not support index_put on every device: keep their bytes as uint8.
    return torch.uint8 if dtype in FP8_DTYPES.values() else dtype


class ReqToTokenPool:
    """Maps a request row to the KV slot of each of its tokens: int32 `[size + 1, max_context_len]`.

    Row 0 is a dummy that padded batch entries point at; rows 1..size are handed out by
    `alloc`. `alloc(n)` returns None when fewer than n rows are free. `free` raises
    DoubleFreeError for a row that is not allocated and ForeignIndexError for a row
    outside 1..size.
    """

    def __init__(self, size: int, max_context_len: int, device: str | torch.device = "cpu") -> None:
        if size < 1 or max_context_len < 1:
            raise ValueError(
                f"req-to-token pool needs size >= 1 and max_context_len >= 1 (got {size}, {max_context_len})"
            )
        self.size = size
        self.max_context_len = max_context_len
        self.device = torch.device(device)
        self.req_to_token = torch.zeros((size + 1, max_context_len), dtype=torch.int32, device=self.device)
        self.clear()

    def clear(self) -> None:
        """Free every row (row 0 stays reserved)."""
        # popped from the end, so rows come out in ascending order
        self._free = list(range(self.size, 0, -1))
        self._live = [False] * (self.size + 1)

    def available_size(self) -> int:
        return len(self._free)

    def alloc(self, n: int = 1) -> list[int] | None:
        """Take n free rows, or return None (nothing taken) when fewer are free."""
        if n < 0:
            raise ValueError(f"cannot allocate {n} rows")
        if n > len(self._free):
            return None
        rows = [self._free.pop() for _ in range(n)]
        for r in rows:
            self._live[r] = True
        return rows

    def free(self, rows: int | Iterable[int]) -> None:
        """Return rows to the pool; all or nothing: a bad row raises and frees none."""
        rows = [rows] if isinstance(rows, int) else [int(r) for r in rows]
        seen: set[int] = set()
        for r in rows:
            if not 1 <= r <= self.size:
                raise ForeignIndexError(f"request row {r} is not in this pool (rows 1..{self.size}; row 0 is reserved)")
            if not self._live[r] or r in seen:
                raise DoubleFreeError(f"request row {r} is not allocated -- it was freed already or never handed out")
            seen.add(r)
        for r in rows:
            self._live[r] = False
            self._free.append(r)

    def write(self, row: int, start: int, locs: torch.Tensor) -> None:
        """Store the KV slots `locs` for tokens `start .. start + len(locs)` of `row`."""
        end = start + int(locs.numel())
        if end > self.max_context_len:
            raise IndexError(f"row {row} holds {self.max_context_len} tokens, write would end at {end}")
        self.req_to_token[row, start:end] = locs.to(torch.int32)

    def nbytes(self) -> int:
        return self.req_to_token.nbytes


class MHATokenToKVPool:
    """Per-layer key and value buffers `[size + page_size, head_num, head_dim]`, by global layer id.

    `size` slots are usable; the extra page covers slot/page 0, which is reserved. Locations
    are slot indices (int tensors). An unknown layer id raises KeyError naming the ids held.
    """

    def __init__(
        self,
        size: int,
        page_size: int,
        dtype: torch.dtype | str,
        head_num: int,
        head_dim: int,
        v_head_dim: int | None = None,
        layer_ids: Sequence[int] = (),
        device: str | torch.device = "cpu",
    ) -> None:
        self.size = size
        self.page_size = page_size
        self.dtype = torch_dtype(dtype)
        self.store_dtype = _store_dtype(self.dtype)
        self.head_num = head_num
        self.head_dim = head_dim
        self.v_head_dim = head_dim if v_head_dim is None else v_head_dim
        self.layer_ids = tuple(layer_ids)
        self.device = torch.device(device)
        rows = size + page_size
        self._k: dict[int, torch.Tensor] = {}
        self._v: dict[int, torch.Tensor] = {}
        for lid in self.layer_ids:
            self._k[lid] = torch.zeros((rows, head_num, head_dim), dtype=self.store_dtype, device=self.device)
            self._v[lid] = torch.zeros((rows, head_num, self.v_head_dim), dtype=self.store_dtype, device=self.device)

    def _check_layer(self, layer_id: int) -> None:
        if layer_id not in self._k:
            raise KeyError(f"layer {layer_id} has no KV buffer in this pool (holds layers {list(self.layer_ids)})")

    def _view(self, buf: torch.Tensor) -> torch.Tensor:
        return buf if self.store_dtype == self.dtype else buf.view(self.dtype)

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        self._check_layer(layer_id)
        return self._view(self._k[layer_id])

    def get_value_buffer(self, layer_id: int) -> torch.Tensor:
        self._check_layer(layer_id)
        return self._view(self._v[layer_id])

    def get_kv_buffer(self, layer_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.get_key_buffer(layer_id), self.get_value_buffer(layer_id)

    @property
    def k_buffer(self) -> list[torch.Tensor]:
        """Key buffers in `layer_ids` order (storage dtype)."""
        return [self._k[lid] for lid in self.layer_ids]

    @property
    def v_buffer(self) -> list[torch.Tensor]:
        return [self._v[lid] for lid in self.layer_ids]

    def set_kv_buffer(self, layer_id: int, loc: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor) -> None:
        """Write keys/values for the slots `loc`; inputs are cast to the pool's dtype."""
        self._check_layer(layer_id)
        k = cache_k.reshape(-1, self.head_num, self.head_dim).to(self.dtype)
        v = cache_v.reshape(-1, self.head_num, self.v_head_dim).to(self.dtype)
        if self.store_dtype != self.dtype:
            k, v = k.view(self.store_dtype), v.view(self.store_dtype)
        loc = loc.to(device=self.device, dtype=torch.int64)
        self._k[layer_id][loc] = k
        self._v[layer_id][loc] = v

    def bytes_per_token(self) -> int:
        """Bytes one token slot costs across all layers (keys and values)."""
        elt = torch.empty((), dtype=self.store_dtype).element_size()
        return len(self.layer_ids) * self.head_num * (self.head_dim + self.v_head_dim) * elt

    def nbytes(self) -> int:
        return sum(t.nbytes for t in self._k.values()) + sum(t.nbytes for t in self._v.values())


class SWAKVPool:
    """A full-attention sub-pool plus a sliding-window sub-pool, routed by global layer id.

    Callers address tokens by *full* slot index. SWA layers translate through
    `full_to_swa_index_mapping` (length `size + page_size + 1`; the last entry is -1 so a
    -1 location, "no previous token", translates to -1). The SWA allocator writes the map.
    With `identity_map=True` (a full-capacity draft depth) the SWA sub-pool has the full
    size and the map is the identity, so SWA slots equal full slots. `index_mapping`
    shares another pool's map: a draft pool following its target's allocator, or (with
    `identity_map=True`) another full-capacity depth's identity map.
    """

    def __init__(
        self,
        size: int,
        size_swa: int,
        page_size: int,
        dtype: torch.dtype | str,
        head_num: int,
        head_dim: int,
        v_head_dim: int | None = None,
        swa_attention_layer_ids: Sequence[int] = (),
        full_attention_layer_ids: Sequence[int] = (),
        device: str | torch.device = "cpu",
        *,
        swa_head_num: int | None = None,
        swa_head_dim: int | None = None,
        swa_v_head_dim: int | None = None,
        identity_map: bool = False,
        index_mapping: torch.Tensor | None = None,
    ) -> None:
        overlap = set(swa_attention_layer_ids) & set(full_attention_layer_ids)
        if overlap:
            raise ValueError(f"layers {sorted(overlap)} are listed as both SWA and full attention")
        if identity_map and size_swa != size:
            raise ValueError(f"an identity map needs size_swa == size (got {size_swa} and {size})")
        self.size = size
        self.size_swa = size_swa
        self.page_size = page_size
        self.device = torch.device(device)
        self.identity_map = identity_map
        self.swa_attention_layer_ids = tuple(swa_attention_layer_ids)
        self.full_attention_layer_ids = tuple(full_attention_layer_ids)
        self.full_kv_pool = MHATokenToKVPool(
            size, page_size, dtype, head_num, head_dim, v_head_dim, self.full_attention_layer_ids, device
        )
        swa_dim = swa_head_dim or head_dim
        self.swa_kv_pool = MHATokenToKVPool(
            size_swa,
            page_size,
            dtype,
            swa_head_num or head_num,
            swa_dim,
            swa_v_head_dim or (swa_dim if swa_head_dim else (v_head_dim or head_dim)),
            self.swa_attention_layer_ids,
            device,
        )
        self.dtype = self.full_kv_pool.dtype
        self._swa_layers = frozenset(self.swa_attention_layer_ids)
        self.layer_ids = tuple(sorted((*self.full_attention_layer_ids, *self.swa_attention_layer_ids)))
        if index_mapping is not None:
            # a draft pool shares its target's map (the target's allocator keeps it current), or
            # another full-capacity depth's identity map (read-only, so one copy serves every depth)
            if index_mapping.numel() != size + page_size + 1:
                raise ValueError(
                    f"a shared index map must have {size + page_size + 1} entries (got {index_mapping.numel()})"
                )
            self.full_to_swa_index_mapping = index_mapping
        else:
            self.full_to_swa_index_mapping = torch.zeros(size + page_size + 1, dtype=torch.int64, device=self.device)
            self.clear_mapping()

    def clear_mapping(self) -> None:
        """Reset the map: identity for a full-capacity pool, else every slot unmapped (0)."""
        m = self.full_to_swa_index_mapping
        if self.identity_map:
            m.copy_(torch.arange(m.numel(), dtype=torch.int64, device=self.device))
        else:
            m.zero_()
        m[-1] = -1

    def is_swa_layer(self, layer_id: int) -> bool:
        if layer_id not in self._swa_layers and layer_id not in self.full_attention_layer_ids:
            raise KeyError(f"layer {layer_id} has no KV buffer in this pool (holds layers {list(self.layer_ids)})")
        return layer_id in self._swa_layers

    def translate_loc_from_full_to_swa(self, loc: torch.Tensor) -> torch.Tensor:
        """SWA slots for full slots `loc` (0 where the token has left the window)."""
        return self.full_to_swa_index_mapping[loc.to(torch.int64)]

    def _pool(self, layer_id: int) -> MHATokenToKVPool:
        return self.swa_kv_pool if self.is_swa_layer(layer_id) else self.full_kv_pool

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        return self._pool(layer_id).get_key_buffer(layer_id)

    def get_value_buffer(self, layer_id: int) -> torch.Tensor:
        return self._pool(layer_id).get_value_buffer(layer_id)

    def get_kv_buffer(self, layer_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self._pool(layer_id).get_kv_buffer(layer_id)

    def set_kv_buffer(self, layer_id: int, loc: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor) -> None:
        """Write keys/values at *full* slots `loc`; SWA layers translate them through the map first."""
        if self.is_swa_layer(layer_id):
            self.swa_kv_pool.set_kv_buffer(layer_id, self.translate_loc_from_full_to_swa(loc), cache_k, cache_v)
        else:
            self.full_kv_pool.set_kv_buffer(layer_id, loc, cache_k, cache_v)

    def nbytes(self) -> int:
        """Bytes of both sub-pools' KV buffers (the index map is bookkeeping, counted apart)."""
        return self.full_kv_pool.nbytes() + self.swa_kv_pool.nbytes()


KVPool = MHATokenToKVPool | SWAKVPool

__all__ = ["KVPool", "MHATokenToKVPool", "ReqToTokenPool", "SWAKVPool", "torch_dtype"]
