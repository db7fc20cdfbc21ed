"""`ForwardBatch`: what one attention call needs to know about the batch it runs on.

Every request in a batch owns a row of the req-to-token table (`req_pool_indices`). For
an extend (prefill with a cached prefix), request i already holds `extend_prefix_lens[i]`
tokens in the KV pool and adds `seq_lens[i] - extend_prefix_lens[i]` new ones; for a
decode, every request adds exactly one. `out_cache_loc` lists the pool slots (full-pool
indices) of the new tokens, request after request, and the caller has already written
them into the req-to-token rows: the backend only reads the table.
"""

from __future__ import annotations

import enum

import attrs
import torch

from attention.errors import AttentionInputError


class ForwardMode(enum.Enum):
    """Whether a batch adds a run of tokens per request (EXTEND) or exactly one (DECODE)."""

    EXTEND = "extend"
    DECODE = "decode"


def _as_index(t: torch.Tensor | list[int], name: str) -> torch.Tensor:
    out = torch.as_tensor(t)
    if out.dim() != 1:
        raise AttentionInputError(f"'{name}' must be a 1-d tensor (got shape {tuple(out.shape)})")
    if out.numel() and (out.dtype.is_floating_point or out.dtype == torch.bool):
        raise AttentionInputError(f"'{name}' must hold integers (got {out.dtype})")
    return out.to(torch.int64)


@attrs.frozen(slots=True, eq=False)
class ForwardBatch:
    """One batch of requests as attention sees it; build it with `extend()` or `decode()`.

    Lengths are kept on the CPU as tuples too, because the reference backend loops over
    requests and slicing by Python ints avoids a device sync per request. Batches
    compare by identity (they hold tensors), which is how backends tell a new batch.
    """

    mode: ForwardMode
    req_pool_indices: torch.Tensor
    seq_lens: torch.Tensor
    extend_prefix_lens: torch.Tensor
    out_cache_loc: torch.Tensor
    seq_lens_cpu: tuple[int, ...]
    prefix_lens_cpu: tuple[int, ...]

    @classmethod
    def extend(
        cls,
        *,
        req_pool_indices: torch.Tensor | list[int],
        seq_lens: torch.Tensor | list[int],
        extend_prefix_lens: torch.Tensor | list[int],
        out_cache_loc: torch.Tensor | list[int],
    ) -> ForwardBatch:
        """A prefill/extend batch; raises AttentionInputError when the lengths disagree."""
        return cls._build(ForwardMode.EXTEND, req_pool_indices, seq_lens, extend_prefix_lens, out_cache_loc)

    @classmethod
    def decode(
        cls,
        *,
        req_pool_indices: torch.Tensor | list[int],
        seq_lens: torch.Tensor | list[int],
        out_cache_loc: torch.Tensor | list[int],
    ) -> ForwardBatch:
        """A decode batch: one new token per request, so the prefix is `seq_lens - 1`."""
        seq = _as_index(seq_lens, "seq_lens")
        return cls._build(ForwardMode.DECODE, req_pool_indices, seq, seq - 1, out_cache_loc)

    @classmethod
    def _build(
        cls,
        mode: ForwardMode,
        req_pool_indices: torch.Tensor | list[int],
        seq_lens: torch.Tensor | list[int],
        prefix_lens: torch.Tensor | list[int],
        out_cache_loc: torch.Tensor | list[int],
    ) -> ForwardBatch:
        rows = _as_index(req_pool_indices, "req_pool_indices")
        seq = _as_index(seq_lens, "seq_lens")
        prefix = _as_index(prefix_lens, "extend_prefix_lens")
        loc = _as_index(out_cache_loc, "out_cache_loc")
        if not (rows.numel() == seq.numel() == prefix.numel()):
            msg = (
                f"batch sizes disagree: {rows.numel()} req_pool_indices, {seq.numel()} seq_lens, "
                f"{prefix.numel()} extend_prefix_lens -- pass one entry per request"
            )
            raise AttentionInputError(msg)
        seq_cpu = tuple(int(x) for x in seq.cpu())
        prefix_cpu = tuple(int(x) for x in prefix.cpu())
        for i, (s, p) in enumerate(zip(seq_cpu, prefix_cpu, strict=True)):
            if p < 0 or s <= p:
                msg = f"request {i} has seq_len {s} and prefix {p}: each request must add at least one token"
                raise AttentionInputError(msg)
        new_tokens = sum(seq_cpu) - sum(prefix_cpu)
        if loc.numel() != new_tokens:
            msg = f"'out_cache_loc' has {loc.numel()} slots for {new_tokens} new tokens -- allocate one slot per new token"
            raise AttentionInputError(msg)
        return cls(mode, rows, seq, prefix, loc, seq_cpu, prefix_cpu)

    @property
    def batch_size(self) -> int:
        return len(self.seq_lens_cpu)

    @property
    def extend_seq_lens(self) -> torch.Tensor:
        """New tokens per request."""
        return self.seq_lens - self.extend_prefix_lens

    @property
    def extend_lens_cpu(self) -> tuple[int, ...]:
        return tuple(s - p for s, p in zip(self.seq_lens_cpu, self.prefix_lens_cpu, strict=True))

    @property
    def num_new_tokens(self) -> int:
        return int(self.out_cache_loc.numel())
