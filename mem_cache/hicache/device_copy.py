"""Copies between the device KV pool and host pages, layer by layer, through the pool's SWA slot map.

A token whose SWA slot was released maps to slot 0, so a page is backed up before its
SWA slots are released, never after (the scheduler keeps to that).
"""

from __future__ import annotations

from typing import Any

import torch

from mem_cache.hicache.layout import KVLayout


def as_index(device_indices: Any) -> torch.Tensor:
    """Device slot indices as one flat int64 tensor."""
    return torch.as_tensor(device_indices, dtype=torch.int64).reshape(-1)


def host_view(t: torch.Tensor, layout: KVLayout) -> torch.Tensor:
    """`t` as the host pool stores it (fp8 KV is kept as raw bytes on the host)."""
    return t.view(layout.host_dtype) if t.dtype != layout.host_dtype else t


def read_device(
    pool: Any, layout: KVLayout, idx: torch.Tensor
) -> tuple[dict[int, torch.Tensor], dict[int, torch.Tensor]]:
    """K and V of the slots `idx`, per layer, in host form."""
    translate = getattr(pool, "translate_loc_from_full_to_swa", None)
    swa_idx = None
    k: dict[int, torch.Tensor] = {}
    v: dict[int, torch.Tensor] = {}
    for g in layout.layers:
        kb = pool.get_key_buffer(g.layer_id)
        vb = pool.get_value_buffer(g.layer_id)
        at = idx.to(kb.device)
        if g.is_swa and translate is not None:
            if swa_idx is None:
                swa_idx = translate(at)
            at = swa_idx
        k[g.layer_id] = host_view(kb[at], layout)
        v[g.layer_id] = host_view(vb[at], layout)
    return k, v


def write_device(
    pool: Any,
    layout: KVLayout,
    loc: torch.Tensor,
    k: dict[int, torch.Tensor],
    v: dict[int, torch.Tensor],
    *,
    non_blocking: bool = False,
) -> None:
    """Write host K and V back into the device slots `loc`, per layer."""
    dt = layout.dtype
    for g in layout.layers:
        device = pool.get_key_buffer(g.layer_id).device
        kt = k[g.layer_id].to(device, non_blocking=non_blocking)
        vt = v[g.layer_id].to(device, non_blocking=non_blocking)
        if kt.dtype != dt:
            kt, vt = kt.view(dt), vt.view(dt)
        pool.set_kv_buffer(g.layer_id, loc.to(device), kt, vt)


__all__ = ["as_index", "host_view", "read_device", "write_device"]
