"""The page layout of a KV pool as the host tier and storage see it.

A page is `page_size` consecutive tokens across every layer of the pool. Layers may
differ in geometry (SWA layers with fewer heads, a v head dim unlike the k one), so
the layout is per layer: for each global layer id, in ascending order, the key block
`[page_size, k_heads, k_dim]` then the value block `[page_size, v_heads, v_dim]`.
That is also the byte order of a page payload in storage. `tag` is a short digest of
the whole layout; it seeds the page keys so two models sharing a storage directory
never read each other's pages.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import attrs
import torch

_FP8 = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n))


@attrs.frozen(slots=True)
class LayerGeometry:
    """Shape of one layer's per-token key and value entries."""

    layer_id: int
    k_shape: tuple[int, int]
    v_shape: tuple[int, int]
    is_swa: bool = False


@attrs.frozen(slots=True)
class KVLayout:
    """Everything needed to copy, size and serialize pages of one KV pool."""

    page_size: int
    dtype: torch.dtype
    layers: tuple[LayerGeometry, ...]

    @property
    def host_dtype(self) -> torch.dtype:
        """The dtype host tensors use: fp8 is kept as raw uint8 (index_put support varies)."""
        return torch.uint8 if self.dtype in _FP8 else self.dtype

    @property
    def element_size(self) -> int:
        return torch.empty((), dtype=self.host_dtype).element_size()

    @property
    def token_bytes(self) -> int:
        """Bytes of one token across all layers (keys and values)."""
        per = sum(g.k_shape[0] * g.k_shape[1] + g.v_shape[0] * g.v_shape[1] for g in self.layers)
        return per * self.element_size

    @property
    def page_bytes(self) -> int:
        return self.token_bytes * self.page_size

    @property
    def tag(self) -> str:
        desc = repr((self.page_size, str(self.dtype), [attrs.astuple(g) for g in self.layers]))
        return hashlib.sha256(desc.encode()).hexdigest()[:16]


def layout_of(kv_pool: Any, *, page_size: int | None = None, layer_ids: Sequence[int] | None = None) -> KVLayout:
    """Read the layout of a pool with `layer_ids`, `get_key_buffer` and `get_value_buffer`.

    `page_size` defaults to the pool's own; raises ValueError when neither says one.
    SWA layers are recognised through the pool's `is_swa_layer` when it has one.
    """
    page = page_size if page_size is not None else getattr(kv_pool, "page_size", None)
    if page is None or page < 1:
        msg = f"cannot tell the page size of {type(kv_pool).__name__} (got {page!r}) -- pass page_size="
        raise ValueError(msg)
    ids = tuple(sorted(layer_ids if layer_ids is not None else kv_pool.layer_ids))
    if not ids:
        msg = f"{type(kv_pool).__name__} holds no layers -- nothing to cache"
        raise ValueError(msg)
    is_swa = getattr(kv_pool, "is_swa_layer", None)
    layers = []
    dtype = None
    for lid in ids:
        k = kv_pool.get_key_buffer(lid)
        v = kv_pool.get_value_buffer(lid)
        if dtype is None:
            dtype = k.dtype
        if k.dtype != dtype or v.dtype != dtype:
            msg = f"layer {lid} stores {k.dtype}/{v.dtype}, other layers {dtype} -- one dtype per pool is supported"
            raise ValueError(msg)
        layers.append(
            LayerGeometry(
                lid,
                (int(k.shape[1]), int(k.shape[2])),
                (int(v.shape[1]), int(v.shape[2])),
                bool(is_swa(lid)) if is_swa is not None else False,
            )
        )
    assert dtype is not None
    return KVLayout(page_size=int(page), dtype=dtype, layers=tuple(layers))


def host_pool_pages(device_tokens: int, layout: KVLayout, *, hicache_ratio: float = 2.0, hicache_size: int = 0) -> int:
    """Host capacity in pages: `hicache_size` GB when > 0, else `hicache_ratio` x the device pool.

    A GB here is 10**9 bytes, as in the field's help text. Always at least one page.
    """
    if hicache_size > 0:
        pages = int(hicache_size * 10**9 // layout.page_bytes)
    else:
        pages = int(device_tokens * hicache_ratio) // layout.page_size
    return max(1, pages)


__all__ = ["KVLayout", "LayerGeometry", "host_pool_pages", "layout_of"]
