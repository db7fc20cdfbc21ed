"""The attention backend contract: public methods do the checks and the KV writes, `_impl`s attend.

A backend is built from a model runner (`attention.runner.ModelRunnerLike`). For every
batch it resolves the SWA pool again (`attention.swa.resolve_swa_kv_pool`), so a pool
swapped on the runner is picked up at the next forward; it never keeps a pool across
batches. Per layer it then knows where the layer's K/V lives (`LayerKV`): the SWA pool
through the full->SWA map for a sliding-window layer of that pool, the active pool at
full slots otherwise.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar, Protocol

import attrs
import structlog
import torch

from attention.errors import AttentionInputError
from attention.forward_batch import ForwardBatch, ForwardMode
from attention.layer import AttentionLayer, layer_window
from attention.runner import ModelRunnerLike
from attention.swa import decide_swa_kv_pool, translate_page_table

log = structlog.get_logger(__name__)


@attrs.frozen(slots=True, eq=False)
class LayerKV:
    """Where one layer's K/V lives: the pool to write, the buffers to read, the slot map, the window."""

    layer_id: int
    pool: Any
    k_buffer: torch.Tensor
    v_buffer: torch.Tensor
    full_to_swa: torch.Tensor | None
    window: int | None

    def slots(self, full_slots: torch.Tensor) -> torch.Tensor:
        """Buffer rows for full-pool slots (translated through the map on an SWA layer)."""
        if self.full_to_swa is None:
            return full_slots.to(torch.int64)
        return translate_page_table(self.pool, full_slots)


@attrs.define(slots=True, eq=False)
class ForwardMetadata:
    """Per-batch state shared by every layer: the resolved SWA pool and the batch's pools.

    Rebuilt when the batch or the runner's pool or allocator changes, so a swap is seen
    at the next layer call at the latest.
    """

    batch: ForwardBatch
    active_pool: Any
    allocator: Any
    swa_pool: Any
    rule: str
    req_to_token: torch.Tensor
    cache: dict[Any, Any] = attrs.Factory(dict)


class Attend(Protocol):
    """The call `forward`, `forward_extend` and `forward_decode` share, so a router can hand out any of them."""

    def __call__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: AttentionLayer | int,
        batch: ForwardBatch,
        *,
        save_kv_cache: bool = True,
    ) -> torch.Tensor: ...


class ModeRouter(abc.ABC):
    """One `forward` for a backend and for a pair of them: each says in `_route` where a batch goes."""

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: AttentionLayer | int,
        batch: ForwardBatch,
        *,
        save_kv_cache: bool = True,
    ) -> torch.Tensor:
        """Dispatch on the batch's mode (to what `_route` picks for it)."""
        return self._route(batch)(q, k, v, layer, batch, save_kv_cache=save_kv_cache)

    @abc.abstractmethod
    def _route(self, batch: ForwardBatch) -> Attend: ...


class AttentionBackend(ModeRouter):
    """Base of every attention backend; subclasses implement `_forward_extend` and `_forward_decode`.

    Shapes: q `[tokens, q_heads, head_dim]`, k `[tokens, kv_heads, head_dim]`, v
    `[tokens, kv_heads, v_head_dim]`, one row per new token in `batch.out_cache_loc`
    order; the result is `[tokens, q_heads, v_head_dim]` in q's dtype. The caller has
    written `out_cache_loc` into the req-to-token rows before the call.
    """

    name: ClassVar[str]

    def __init__(self, runner: ModelRunnerLike) -> None:
        self.runner = runner
        self._meta: ForwardMetadata | None = None
        # Resolved once here so a broken runner fails at construction, not mid-batch;
        # forwards resolve again (the pool may be swapped after this).
        self.swa_kv_pool_at_init, self.swa_rule_at_init = decide_swa_kv_pool(runner)
        self._rule = self.swa_rule_at_init
        log.debug("attention.backend_init", backend=self.name, swa_rule=self._rule, draft=runner.is_draft_worker)

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """Why this backend cannot run on this machine, or None when it can."""
        return None

    # -- per batch ---------------------------------------------------------------------

    def init_forward_metadata(self, batch: ForwardBatch) -> ForwardMetadata:
        """Resolve the SWA pool for `batch` and check the batch against the req-to-token table."""
        runner = self.runner
        swa_pool, rule = decide_swa_kv_pool(runner)
        if rule != self._rule:
            log.info("attention.swa_pool_changed", backend=self.name, old=self._rule, new=rule)
            self._rule = rule
        table = runner.req_to_token_pool.req_to_token
        self._check_table(batch, table)
        self._meta = ForwardMetadata(
            batch, runner.token_to_kv_pool, runner.token_to_kv_pool_allocator, swa_pool, rule, table
        )
        return self._meta

    def _metadata(self, batch: ForwardBatch) -> ForwardMetadata:
        meta = self._meta
        runner = self.runner
        if (
            meta is None
            or meta.batch is not batch
            or meta.active_pool is not runner.token_to_kv_pool
            or meta.allocator is not runner.token_to_kv_pool_allocator
        ):
            meta = self.init_forward_metadata(batch)
        return meta

    @staticmethod
    def _check_table(batch: ForwardBatch, table: torch.Tensor) -> None:
        rows = batch.req_pool_indices.to(table.device)
        outside = rows[(rows < 0) | (rows >= table.shape[0])]
        if outside.numel():
            msg = (
                f"req_pool_indices {outside.tolist()} are outside the req-to-token table (rows 0..{table.shape[0] - 1})"
                " -- use rows allocated from the runner's req_to_token_pool"
            )
            raise AttentionInputError(msg)
        if max(batch.seq_lens_cpu, default=0) > table.shape[1]:
            msg = (
                f"a seq_len of {max(batch.seq_lens_cpu)} exceeds the req-to-token row length {table.shape[1]}"
                " -- split the request or size the table for its context length"
            )
            raise AttentionInputError(msg)
        # Table cells of the new tokens, request after request, without a loop per request.
        new = (batch.seq_lens - batch.extend_prefix_lens).to(table.device)
        first = batch.extend_prefix_lens.to(table.device) - (torch.cumsum(new, 0) - new)
        cols = first.repeat_interleave(new) + torch.arange(int(new.sum()), device=table.device)
        written = table[rows.repeat_interleave(new), cols]
        if not torch.equal(written.to(torch.int64), batch.out_cache_loc.to(device=table.device)):
            msg = "out_cache_loc differs from the req-to-token rows of the new tokens -- write the slots into the table before attention"
            raise AttentionInputError(msg)

    def layer_kv(self, meta: ForwardMetadata, layer_id: int) -> LayerKV:
        """Where `layer_id` keeps its K/V for this batch (see the module docstring)."""
        swa_pool = meta.swa_pool
        if swa_pool is not None and _holds_swa_layer(swa_pool, layer_id):
            pool, mapping = swa_pool, swa_pool.full_to_swa_index_mapping
        else:
            pool, mapping = meta.active_pool, None
        try:
            k, v = pool.get_key_buffer(layer_id), pool.get_value_buffer(layer_id)
        except KeyError as exc:
            raise AttentionInputError(
                f"layer {layer_id} has no KV buffer in the runner's pool: {exc.args[0]}"
            ) from None
        try:
            window = layer_window(self.runner.model_shape, layer_id)
        except (IndexError, KeyError):
            raise AttentionInputError(f"layer {layer_id} is not a layer of the runner's model shape") from None
        return LayerKV(layer_id, pool, k, v, mapping, window)

    # -- per layer ---------------------------------------------------------------------

    def _route(self, batch: ForwardBatch) -> Attend:
        """Decode batches go to `forward_decode`, every other to `forward_extend`."""
        return self.forward_decode if batch.mode is ForwardMode.DECODE else self.forward_extend

    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: AttentionLayer | int,
        batch: ForwardBatch,
        *,
        save_kv_cache: bool = True,
    ) -> torch.Tensor:
        """Attend the new tokens of every request over its prefix and themselves (causal)."""
        spec, meta, kv = self._prepare(q, k, v, layer, batch, save_kv_cache)
        return self._forward_extend(q, spec, batch, meta, kv)

    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: AttentionLayer | int,
        batch: ForwardBatch,
        *,
        save_kv_cache: bool = True,
    ) -> torch.Tensor:
        """Attend one new token per request over everything the request holds."""
        if any(n != 1 for n in batch.extend_lens_cpu):
            raise AttentionInputError("forward_decode needs exactly one new token per request -- use forward_extend")
        spec, meta, kv = self._prepare(q, k, v, layer, batch, save_kv_cache)
        return self._forward_decode(q, spec, batch, meta, kv)

    def _prepare(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: AttentionLayer | int,
        batch: ForwardBatch,
        save_kv_cache: bool,
    ) -> tuple[AttentionLayer, ForwardMetadata, LayerKV]:
        spec = AttentionLayer.of(layer)
        n = batch.num_new_tokens
        if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
            raise AttentionInputError(
                f"q, k, v must be [tokens, heads, dim] (got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)})"
            )
        if not (q.shape[0] == k.shape[0] == v.shape[0] == n):
            raise AttentionInputError(f"q, k, v have {q.shape[0]}, {k.shape[0]}, {v.shape[0]} rows for {n} new tokens")
        if k.shape[1] != v.shape[1] or q.shape[1] % k.shape[1] or q.shape[2] != k.shape[2]:
            msg = (
                f"q has {q.shape[1]} heads of dim {q.shape[2]}, k {k.shape[1]} and v {v.shape[1]} heads of dim "
                f"{k.shape[2]}: q heads must be a multiple of the kv heads, with the same head_dim"
            )
            raise AttentionInputError(msg)
        meta = self._metadata(batch)
        kv = self.layer_kv(meta, spec.layer_id)
        if save_kv_cache:
            # The pool takes full slots: an SWA pool translates them for its SWA layers.
            kv.pool.set_kv_buffer(spec.layer_id, batch.out_cache_loc, k, v)
        return spec, meta, kv

    @abc.abstractmethod
    def _forward_extend(
        self, q: torch.Tensor, layer: AttentionLayer, batch: ForwardBatch, meta: ForwardMetadata, kv: LayerKV
    ) -> torch.Tensor: ...

    @abc.abstractmethod
    def _forward_decode(
        self, q: torch.Tensor, layer: AttentionLayer, batch: ForwardBatch, meta: ForwardMetadata, kv: LayerKV
    ) -> torch.Tensor: ...


def _holds_swa_layer(pool: Any, layer_id: int) -> bool:
    try:
        return bool(pool.is_swa_layer(layer_id))
    except KeyError:
        return False
