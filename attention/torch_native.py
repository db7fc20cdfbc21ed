"""`torch_native`: the reference paged attention backend, plain torch, any device.

Extend runs request by request over the request's slots in the req-to-token table;
decode gathers every request's slots into one padded `[batch, span]` table and attends
in one batched step. Grouped-query heads are handled by viewing q as
`[kv_heads, group, ...]` instead of repeating K/V, so no K/V copy is made beyond the
gather itself. Scores and softmax run in float32 (float64 inputs stay float64).

Sliding-window layers read only the keys inside the window: a key older than the
window may already have been freed from the SWA pool, and its map entry no longer
points at it.
"""

from __future__ import annotations

import torch

from attention.base import AttentionBackend, ForwardMetadata, LayerKV
from attention.forward_batch import ForwardBatch
from attention.layer import AttentionLayer


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    *,
    window: int | None,
    scaling: float,
) -> torch.Tensor:
    """Masked GQA attention of q `[tq, hq, d]` over k/v `[tk, hkv, d|dv]` at the given positions.

    A query at position i sees keys j with `j <= i` and, with a window, `i - j < window`.
    Every query must see at least one key. Returns `[tq, hq, dv]` in the compute dtype.
    """
    tq, hq, d = q.shape
    tk, hkv, dv = v.shape
    ct = _compute_dtype(q.dtype)
    qg = q.to(ct).view(tq, hkv, hq // hkv, d).permute(1, 2, 0, 3)  # [hkv, g, tq, d]
    scores = torch.matmul(qg, k.to(ct).permute(1, 2, 0).unsqueeze(1)) * scaling  # [hkv, g, tq, tk]
    rel = q_pos[:, None] - k_pos[None, :]
    allowed = rel >= 0
    if window is not None:
        allowed &= rel < window
    scores = scores.masked_fill(~allowed, float("-inf"))
    out = torch.matmul(scores.softmax(-1), v.to(ct).permute(1, 0, 2).unsqueeze(1))  # [hkv, g, tq, dv]
    return out.permute(2, 0, 1, 3).reshape(tq, hq, dv)


class TorchNativeBackend(AttentionBackend):
    """Reference paged attention (extend and decode) with causal and sliding-window masks."""

    name = "torch_native"

    def _forward_extend(
        self, q: torch.Tensor, layer: AttentionLayer, batch: ForwardBatch, meta: ForwardMetadata, kv: LayerKV
    ) -> torch.Tensor:
        scaling = layer.scaling if layer.scaling is not None else q.shape[-1] ** -0.5
        table = meta.req_to_token
        rows = batch.req_pool_indices.tolist()
        window = kv.window
        outs = []
        offset = 0
        for row, prefix, seq in zip(rows, batch.prefix_lens_cpu, batch.seq_lens_cpu, strict=True):
            n = seq - prefix
            # Keys older than the first query's window are never read (they may be freed).
            start = 0 if window is None else max(0, prefix - window + 1)
            slots = kv.slots(table[row, start:seq])
            device = q.device
            q_pos = torch.arange(prefix, seq, device=device)
            k_pos = torch.arange(start, seq, device=device)
            out = attend(
                q[offset : offset + n], kv.k_buffer[slots], kv.v_buffer[slots], q_pos, k_pos,
                window=window, scaling=scaling,
            )
            outs.append(out)
            offset += n
        return torch.cat(outs).to(q.dtype)

    def _forward_decode(
        self, q: torch.Tensor, layer: AttentionLayer, batch: ForwardBatch, meta: ForwardMetadata, kv: LayerKV
    ) -> torch.Tensor:
        scaling = layer.scaling if layer.scaling is not None else q.shape[-1] ** -0.5
        slots, valid = self._decode_slots(meta, kv)
        k = kv.k_buffer[slots]  # [b, span, hkv, d]
        v = kv.v_buffer[slots]
        b, hq, d = q.shape
        hkv, dv = v.shape[2], v.shape[3]
        ct = _compute_dtype(q.dtype)
        qg = q.to(ct).view(b, hkv, hq // hkv, d)
        scores = torch.einsum("bhgd,blhd->bhgl", qg, k.to(ct)) * scaling
        scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
        out = torch.einsum("bhgl,blhd->bhgd", scores.softmax(-1), v.to(ct))
        return out.reshape(b, hq, dv).to(q.dtype)

    @staticmethod
    def _decode_slots(meta: ForwardMetadata, kv: LayerKV) -> tuple[torch.Tensor, torch.Tensor]:
        """Padded buffer rows `[batch, span]` and their validity, shared by layers of one kind."""
        key = ("decode", kv.window, kv.full_to_swa is not None)
        hit = meta.cache.get(key)
        if hit is not None:
            return hit
        batch, table = meta.batch, meta.req_to_token
        seq = batch.seq_lens.to(table.device)
        longest = max(batch.seq_lens_cpu)
        span = longest if kv.window is None else min(longest, kv.window)
        start = torch.zeros_like(seq) if kv.window is None else (seq - kv.window).clamp(min=0)
        pos = start[:, None] + torch.arange(span, device=table.device)[None, :]
        valid = pos < seq[:, None]
        # Padding columns point at the request's last token: a live slot, never a freed one.
        pos = torch.minimum(pos, seq[:, None] - 1)
        rows = batch.req_pool_indices.to(table.device)
        slots = kv.slots(table[rows[:, None], pos])
        meta.cache[key] = (slots, valid)
        return slots, valid
