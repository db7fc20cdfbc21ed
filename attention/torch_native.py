"""`torch_native`: the reference paged attention backend, plain torch, any device.

Extend attends groups of consecutive requests at once, each request's queries and keys
padded to the group's longest and masked (a long prompt forms a group of its own, so
padding never costs more than the chunk budget); a batch's trailing one-token rows over
a prefix (decode rows mixed into an extend) are attended together as a decode is; decode turns every request's
slots into one padded `[batch, span]` table (once per batch and layer kind), then
gathers and attends a cache-sized chunk of requests at a time, with no Python work per
request. The attention itself is
`scaled_dot_product_attention` with a boolean mask and grouped-query heads
(`enable_gqa`), so K/V are never repeated per query head. Math runs in float32 (float64 inputs stay float64).

Sliding-window layers read only the keys inside the window: a key older than the
window may already have been freed from the SWA pool, and its map entry no longer
points at it.
"""

from __future__ import annotations

import attrs
import torch
import torch.nn.functional as F

from attention.base import AttentionBackend, ForwardMetadata, LayerKV
from attention.forward_batch import ForwardBatch
from attention.layer import AttentionLayer
from attention.runner import ModelRunnerLike

# A CPU decode gathers K (and V) for about this many bytes of requests at a time and
# attends over them before gathering the next: the gather target it keeps stays bounded
# whatever the batch, and the rows are still in the last-level cache when attention
# reads them. Much smaller chunks lose more to per-call thread start-up than they gain.
_CPU_CHUNK_BYTES = 32 << 20


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
    Every query must see at least one key (its own, in practice). Returns `[tq, hq, dv]`
    in the compute dtype.
    """
    ct = _compute_dtype(q.dtype)
    rel = q_pos[:, None] - k_pos[None, :]
    allowed = rel >= 0
    if window is not None:
        allowed &= rel < window
    out = F.scaled_dot_product_attention(
        q.to(ct).transpose(0, 1),
        k.to(ct).transpose(0, 1),
        v.to(ct).transpose(0, 1),
        attn_mask=allowed,
        scale=scaling,
        enable_gqa=True,
    )  # [hq, tq, dv]
    return out.transpose(0, 1)


def _requests_per_chunk(kv: LayerKV, batch_size: int, span: int) -> int:
    """How many requests' K/V a decode gathers at once: `_CPU_CHUNK_BYTES` worth on a CPU, all elsewhere."""
    if kv.k_buffer.device.type != "cpu":
        return max(1, batch_size)
    row_bytes = max(kv.k_buffer[0].nbytes, kv.v_buffer[0].nbytes)
    return max(1, _CPU_CHUNK_BYTES // (span * row_bytes))


class TorchNativeBackend(AttentionBackend):
    """Reference paged attention (extend and decode) with causal and sliding-window masks."""

    name = "torch_native"

    def __init__(self, runner: ModelRunnerLike) -> None:
        super().__init__(runner)
        # Gather targets for decode K and V on a CPU, grown on demand (see `_gather`).
        self._workspace: list[torch.Tensor | None] = [None, None]

    def _forward_extend(
        self, q: torch.Tensor, layer: AttentionLayer, batch: ForwardBatch, meta: ForwardMetadata, kv: LayerKV
    ) -> torch.Tensor:
        singles = self._single_rows(meta)
        if singles is None:
            return self._extend_each(q, layer, batch, meta, kv)
        # a mixed batch: prompts first, then one new token per decoding request, attended as one decode
        first, sub_meta = singles
        split = q.shape[0] - (len(batch.seq_lens_cpu) - first)  # the tokens of the rows before the singles
        head = self._extend_each(q[:split], layer, batch, meta, kv, rows=first) if first else q[:0]
        tail = self._forward_decode(q[split:], layer, sub_meta.batch, sub_meta, kv)
        return torch.cat([head.to(q.dtype), tail])

    @staticmethod
    def _single_rows(meta: ForwardMetadata) -> tuple[int, ForwardMetadata] | None:
        """For an extend batch ending in two or more one-token rows over a prefix (a mixed step's decode rows):
        the index of the first and a decode batch of them; None otherwise. Built once per batch."""
        if "singles" in meta.cache:
            return meta.cache["singles"]  # type: ignore[no-any-return]
        batch = meta.batch
        lens = batch.extend_lens_cpu
        first = len(lens)
        while first and lens[first - 1] == 1 and batch.prefix_lens_cpu[first - 1] > 0:
            first -= 1
        found = None
        if len(lens) - first >= 2:
            sub = ForwardBatch.decode(
                req_pool_indices=batch.req_pool_indices[first:],
                seq_lens=batch.seq_lens[first:],
                out_cache_loc=batch.out_cache_loc[-(len(lens) - first) :],
            )
            found = (first, attrs.evolve(meta, batch=sub, cache={}))
        meta.cache["singles"] = found
        return found

    def _extend_each(
        self,
        q: torch.Tensor,
        layer: AttentionLayer,
        batch: ForwardBatch,
        meta: ForwardMetadata,
        kv: LayerKV,
        *,
        rows: int | None = None,
    ) -> torch.Tensor:
        """The first `rows` requests of the batch (all by default), in groups attended together.

        Consecutive requests whose padded scores fit the chunk budget form one group and
        one masked attention call; a request too large to share one (a long prompt) is
        attended alone, where padding would only cost memory. Many short prompts, a
        batch's usual shape, so cost one call a layer instead of one call a request.
        """
        scaling = layer.scaling if layer.scaling is not None else q.shape[-1] ** -0.5
        n_rows = len(batch.seq_lens_cpu) if rows is None else rows
        outs = []
        for lo, hi in self._extend_groups(meta, kv, n_rows, q.shape[1]):
            slots, q_index, q_valid, allowed = self._extend_plan(meta, kv, lo, hi)
            ct = _compute_dtype(q.dtype)
            out = F.scaled_dot_product_attention(
                q[q_index].to(ct).transpose(1, 2),  # [n, hq, lq, d]
                kv.k_buffer[slots].to(ct).transpose(1, 2),
                kv.v_buffer[slots].to(ct).transpose(1, 2),
                attn_mask=allowed[:, None],
                scale=scaling,
                enable_gqa=True,
            )  # [n, hq, lq, dv]
            outs.append(out.transpose(1, 2)[q_valid])  # the real queries, request after request
        return torch.cat(outs).to(q.dtype)

    @staticmethod
    def _key_spans(batch: ForwardBatch, window: int | None, n_rows: int) -> list[tuple[int, int, int]]:
        """`(prefix, seq, first key)` of each request: keys older than the first query's window are never
        read (they may be freed)."""
        return [
            (prefix, seq, 0 if window is None else max(0, prefix - window + 1))
            for prefix, seq in zip(batch.prefix_lens_cpu[:n_rows], batch.seq_lens_cpu[:n_rows], strict=True)
        ]

    def _extend_groups(self, meta: ForwardMetadata, kv: LayerKV, n_rows: int, heads: int) -> list[tuple[int, int]]:
        """Consecutive `[lo, hi)` request ranges whose padded float32 scores stay within `_CPU_CHUNK_BYTES`."""
        key = ("extend_groups", kv.window, n_rows, heads)
        hit = meta.cache.get(key)
        if hit is not None:
            return hit  # type: ignore[no-any-return]
        groups: list[tuple[int, int]] = []
        lo, lq, lk = 0, 0, 0
        for i, (prefix, seq, start) in enumerate(self._key_spans(meta.batch, kv.window, n_rows)):
            q_len, k_len = max(lq, seq - prefix), max(lk, seq - start)
            if i > lo and (i + 1 - lo) * heads * q_len * k_len * 4 > _CPU_CHUNK_BYTES:
                groups.append((lo, i))
                lo, q_len, k_len = i, seq - prefix, seq - start
            lq, lk = q_len, k_len
        groups.append((lo, n_rows))
        meta.cache[key] = groups
        return groups

    def _extend_plan(
        self, meta: ForwardMetadata, kv: LayerKV, lo: int, hi: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """For requests `lo..hi`: padded key rows `[n, lk]`, the query index `[n, lq]` into the batch's
        queries, which queries are real, and the mask `[n, lq, lk]`; shared by layers of one kind.

        Padding keys point at the request's last token and padding queries repeat its last
        query: live slots and rows, never freed ones, and every query sees at least its own key.
        """
        key = ("extend", kv.window, kv.full_to_swa is not None, lo, hi)
        hit = meta.cache.get(key)
        if hit is not None:
            return hit  # type: ignore[no-any-return]
        batch, table = meta.batch, meta.req_to_token
        device = table.device
        spans = self._key_spans(batch, kv.window, hi)[lo:]
        prefix = torch.tensor([s[0] for s in spans], device=device)
        seq = torch.tensor([s[1] for s in spans], device=device)
        start = torch.tensor([s[2] for s in spans], device=device)
        new = seq - prefix
        before = sum(s - p for p, s, _ in self._key_spans(batch, kv.window, lo))  # queries of earlier requests
        lq, lk = int(new.max()), int((seq - start).max())
        k_pos = start[:, None] + torch.arange(lk, device=device)[None, :]
        k_valid = k_pos < seq[:, None]
        q_step = torch.arange(lq, device=device)[None, :]
        q_valid = q_step < new[:, None]
        q_pos = torch.minimum(prefix[:, None] + q_step, seq[:, None] - 1)
        offsets = torch.cumsum(new, 0) - new + before
        q_index = offsets[:, None] + torch.minimum(q_step, new[:, None] - 1)
        rel = q_pos[:, :, None] - k_pos[:, None, :]
        allowed = (rel >= 0) & k_valid[:, None, :]
        if kv.window is not None:
            allowed &= rel < kv.window
        rows = batch.req_pool_indices[lo:hi].to(device)
        slots = kv.slots(table[rows[:, None], torch.minimum(k_pos, seq[:, None] - 1)])
        plan = (slots, q_index, q_valid, allowed)
        meta.cache[key] = plan
        return plan

    def _forward_decode(
        self, q: torch.Tensor, layer: AttentionLayer, batch: ForwardBatch, meta: ForwardMetadata, kv: LayerKV
    ) -> torch.Tensor:
        scaling = layer.scaling if layer.scaling is not None else q.shape[-1] ** -0.5
        slots, valid = self._decode_slots(meta, kv)
        b, span = slots.shape
        ct = _compute_dtype(q.dtype)
        q4 = q.to(ct)[:, :, None]  # [b, hq, 1, d]
        out = q.new_empty((b, q.shape[1], kv.v_buffer.shape[-1]))
        step = _requests_per_chunk(kv, b, span)
        for lo in range(0, b, step):
            hi = min(b, lo + step)
            k = self._gather(0, kv.k_buffer, slots[lo:hi])
            v = self._gather(1, kv.v_buffer, slots[lo:hi])
            out[lo:hi] = F.scaled_dot_product_attention(
                q4[lo:hi],
                k.to(ct).transpose(1, 2),
                v.to(ct).transpose(1, 2),
                attn_mask=valid[lo:hi, None, None, :],
                scale=scaling,
                enable_gqa=True,
            )[:, :, 0]  # [n, hq, dv]
        return out

    def _gather(self, which: int, buffer: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """`buffer[slots]` as `[n, span, heads, dim]`, one index_select over the flat slot list.

        On a CPU the rows land in a workspace kept across layers and steps: a fresh
        tensor of this size is page-faulted in by the kernel on every call, which costs
        about as much as the copy itself. Other devices have caching allocators.
        """
        n, span = slots.shape
        row = buffer.shape[1:]
        flat = slots.reshape(-1)
        if buffer.device.type != "cpu":
            return buffer.index_select(0, flat).view(n, span, *row)
        need = flat.numel() * row.numel()
        ws = self._workspace[which]
        if ws is None or ws.dtype != buffer.dtype or ws.numel() < need:
            # A plain tensor, even when the first call runs under inference_mode: later
            # calls outside it may not write into an inference tensor.
            with torch.inference_mode(False):
                ws = buffer.new_empty(need + need // 4)  # headroom: spans grow by one per step
            self._workspace[which] = ws
        rows = ws[:need].view(flat.numel(), *row)
        torch.index_select(buffer, 0, flat, out=rows)
        return rows.view(n, span, *row)

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
