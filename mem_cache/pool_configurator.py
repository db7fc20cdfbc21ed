"""Pool configurators: how many tokens each KV pool gets from a byte budget.

Pure arithmetic over plain values (`PlanInputs`, built from one config snapshot by the
KV-cache configurator) and a model's layer costs (`LayerCosts`). Three strategies, picked
by `choose_pool_configurator`:

- `DefaultPoolConfigurator`: every layer full capacity; `cell = f*L + f_d*D`.
- `HybridSWAPoolConfigurator`: full layers full capacity, sliding-window layers sized
  `swa_full_tokens_ratio` of that; `cell = f*(F+Df) + s*Dsf + r*s*(S+Ds)`. An all-SWA
  model puts everything in the SWA pool.
- `SWAChunkCapPoolConfigurator`: without a radix cache, the SWA pool only needs what
  the live requests can hold; it is fixed at that and the full pool gets the rest.

The budget covers every tensor the pools allocate: KV buffers including each pool's
padding page, the full-to-SWA index maps (8 bytes a slot; the target's, and one identity
map that every full-capacity draft depth shares), and the req-to-token table.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import attrs

from mem_cache.allocation_sizing import get_alloc_len_per_decode, get_req_to_token_extra_context_len
from mem_cache.errors import InsufficientMemoryError, PlanError
from mem_cache.model_shape import DTYPE_BYTES, ModelShape

# Algorithms whose draft model keeps its own KV cache, budgeted next to the target's.
DRAFT_KV_ALGORITHMS = frozenset({"EAGLE", "EAGLE3", "STANDALONE", "NEXTN"})
MAP_BYTES = 8  # one int64 entry of a full-to-SWA index map
ROW_BYTES = 4  # one int32 entry of the req-to-token table
MAX_NUM_REQS = 4096
REQS_PER_CONTEXT = 512  # default rows: 512 per context's worth of tokens, as serving engines do
REQ_TABLE_SHARE = 16  # the default request table takes at most 1/16 of the budget
PREFILL_CHUNKS_IN_FLIGHT = 1


def align(n: int | float, page: int) -> int:
    """Round down to a multiple of page (never below 0)."""
    return max(0, int(n) // page * page)


def align_up(n: int, page: int) -> int:
    return -(-int(n) // page) * page


@attrs.frozen(slots=True)
class PlanInputs:
    """Every config value a plan uses, read from one snapshot."""

    page_size: int
    kv_cache_dtype: str
    context_len: int
    swa_full_tokens_ratio: float
    mem_fraction_static: float
    max_total_tokens: int | None = None
    max_running_requests: int | None = None
    chunked_prefill_size: int | None = None
    disable_radix_cache: bool = False
    disable_hybrid_swa_memory: bool = False
    speculative_algorithm: str | None = None
    num_steps: int | None = None
    topk: int | None = None
    max_draft_tokens: int = 0
    disaggregation_mode: str = "null"
    decode_extra_slots: int = 0

    @property
    def elt(self) -> int:
        return DTYPE_BYTES[self.kv_cache_dtype]

    @property
    def has_draft_kv(self) -> bool:
        return self.speculative_algorithm in DRAFT_KV_ALGORITHMS

    @property
    def alloc_len_per_decode(self) -> int:
        return get_alloc_len_per_decode(
            self.page_size, self.num_steps, self.topk, max_draft_tokens=self.max_draft_tokens
        )

    @property
    def extra_context_len(self) -> int:
        return get_req_to_token_extra_context_len(
            self.page_size, self.num_steps, self.topk, max_draft_tokens=self.max_draft_tokens
        )

    @property
    def req_to_token_cols(self) -> int:
        return self.context_len + self.extra_context_len

    @property
    def extra_rows(self) -> int:
        return self.decode_extra_slots if self.disaggregation_mode == "decode" else 0


@attrs.frozen(slots=True)
class LayerCosts:
    """Per-layer token bytes and layer counts of the target and its draft.

    `f`/`s`: bytes per token of one full/SWA target layer; `F`/`S`: their counts (F = all
    layers when the model has no SWA pool). Draft: `Df` full layers, `Ds` SWA layers
    sharing the target's SWA map, `Dsf` SWA depths with full-capacity rings.
    """

    f: int
    s: int
    F: int
    S: int
    f_d: int = 0
    s_d: int = 0
    Df: int = 0
    Ds: int = 0
    Dsf: int = 0

    @classmethod
    def of(cls, shape: ModelShape, draft: ModelShape | None, inputs: PlanInputs) -> LayerCosts:
        """Costs for `shape` (and `draft` when the algorithm keeps draft KV) under `inputs`."""
        elt = inputs.elt
        no_hybrid = inputs.disable_hybrid_swa_memory
        swa_pool = shape.has_swa_layers(disable_hybrid_swa_memory=no_hybrid)
        f = shape.full_bytes_per_layer(elt)
        if swa_pool:
            F, S = len(shape.full_attention_layer_ids), len(shape.swa_attention_layer_ids)
        else:
            if shape.swa_attention_layer_ids and shape.swa_bytes_per_layer(elt) != f:
                raise PlanError(
                    f"disable_hybrid_swa_memory is set but the SWA layers have their own head geometry "
                    f"({shape.swa_kv_heads} heads of {shape.swa_k_dim}) -- keep hybrid SWA memory on for this model"
                )
            F, S = shape.num_hidden_layers, 0
        costs = cls(f=f, s=shape.swa_bytes_per_layer(elt), F=F, S=S)
        if draft is None or not inputs.has_draft_kv:
            return costs
        f_d, s_d = draft.full_bytes_per_layer(elt), draft.swa_bytes_per_layer(elt)
        n_swa = (
            len(draft.swa_attention_layer_ids) if draft.sliding_window is not None or draft.mtp_local_layer_ids else 0
        )
        if not swa_pool:  # no SWA pool to share: every draft layer is sized like a full one
            return attrs.evolve(costs, f_d=f_d, s_d=s_d, Df=draft.num_hidden_layers)
        Df = draft.num_hidden_layers - n_swa
        banded = shape.is_hybrid_swa(disable_hybrid_swa_memory=no_hybrid) and draft.mtp_local_layer_ids is not None
        return attrs.evolve(costs, f_d=f_d, s_d=s_d, Df=Df, Ds=0 if banded else n_swa, Dsf=n_swa if banded else 0)

    @property
    def full_per_token(self) -> int:
        """Target full-layer bytes per full-pool token (what `sgconf plan` calls full)."""
        return self.f * self.F

    @property
    def swa_per_token(self) -> int:
        return self.s * self.S

    @property
    def draft_index_maps(self) -> int:
        """Full-to-SWA maps the draft owns: one identity map shared by every full-capacity depth.

        The identity map is read-only (full slot i is SWA slot i), so a copy per depth would
        hold the same values; sharing one frees `Dsf - 1` maps' bytes for KV tokens.
        """
        return 1 if self.Dsf else 0

    @property
    def draft_per_token(self) -> int:
        return self.f_d * self.Df + self.s_d * (self.Ds + self.Dsf)


@attrs.frozen(slots=True)
class MemoryPoolConfig:
    """A KV memory plan: pool sizes in tokens (page-aligned) and the bytes each pool takes."""

    configurator: str
    page_size: int
    kv_cache_dtype: str
    max_total_num_tokens: int
    full_max_total_num_tokens: int
    swa_max_total_num_tokens: int
    max_num_reqs: int
    req_to_token_shape: tuple[int, int]
    costs: LayerCosts
    pool_bytes: tuple[tuple[str, int], ...]
    budget_bytes: int
    capped: bool
    max_draft_tokens: int
    alloc_len_per_decode: int
    extra_context_len: int
    # tensor parallelism: every size above is what ONE attention rank holds
    tp_size: int = 1
    kv_heads_per_rank: int | None = None
    kv_heads_total: int | None = None
    # where `budget_bytes` came from: the setting, or the measurement and fraction behind it
    budget_source: str | None = None

    @property
    def total_bytes(self) -> int:
        return sum(b for _, b in self.pool_bytes)

    def bytes_by_pool(self) -> dict[str, int]:
        return dict(self.pool_bytes)

    @property
    def uses_swa_pool(self) -> bool:
        return self.configurator != DefaultPoolConfigurator.name

    def describe(self) -> dict[str, Any]:
        """Plain data for `sgconf plan --format json` and `/server_info`."""
        c = self.costs
        return {
            "configurator": self.configurator,
            "page_size": self.page_size,
            "kv_cache_dtype": self.kv_cache_dtype,
            "bytes_per_token": {"full": c.full_per_token, "swa": c.swa_per_token, "draft": c.draft_per_token},
            "draft_layers": {"full": c.Df, "swa": c.Ds, "swa_full_capacity": c.Dsf},
            "max_total_num_tokens": self.max_total_num_tokens,
            "full_max_total_num_tokens": self.full_max_total_num_tokens,
            "swa_max_total_num_tokens": self.swa_max_total_num_tokens,
            "max_num_reqs": self.max_num_reqs,
            "req_to_token_shape": list(self.req_to_token_shape),
            "max_draft_tokens": self.max_draft_tokens,
            "alloc_len_per_decode": self.alloc_len_per_decode,
            "pool_bytes": {k: v for k, v in self.pool_bytes if v},
            "total_bytes": self.total_bytes,
            "budget_bytes": self.budget_bytes,
            "budget_source": self.budget_source,
            "capped_by_max_total_tokens": self.capped,
            "tensor_parallel": {
                "tp_size": self.tp_size,
                "kv_heads_total": self.kv_heads_total,
                "kv_heads_per_rank": self.kv_heads_per_rank,
                "replicated": self.tp_size > (self.kv_heads_total or self.tp_size),
                "sizes_are": "per rank",
            },
        }


def gib_at_least(n: int) -> str:
    """`n` bytes in GiB, rounded up to two decimals so the printed size is never below `n`."""
    hundredths = -(-n * 100 // (1 << 30))
    return f"{hundredths // 100}.{hundredths % 100:02d}"


def validate_swa_pool_size(swa_tokens: int, sliding_window: int, page_size: int, ratio: float) -> None:
    """Refuse an SWA pool that cannot hold one window plus a page.

    Raises PlanError naming swa_full_tokens_ratio.
    """
    if sliding_window + page_size >= swa_tokens:
        raise PlanError(
            f"the SWA pool of {swa_tokens} tokens cannot hold one sliding window ({sliding_window}) plus a page "
            f"({page_size}) -- raise swa_full_tokens_ratio (now {ratio}) or the memory for the KV cache"
        )


class PoolConfigurator:
    """Template: `plan` does the accounting, caps and checks; subclasses size the pools in `_sizes`."""

    name: ClassVar[str] = "default"

    def __init__(self, shape: ModelShape, costs: LayerCosts, inputs: PlanInputs) -> None:
        self.shape = shape
        self.costs = costs
        self.inputs = inputs

    # ---- bytes of a plan ---------------------------------------------------------------
    def _has_swa_pool(self) -> bool:
        return False

    def pool_bytes(self, full: int, swa: int, reqs: int) -> dict[str, int]:
        """Bytes each pool allocates for a plan of `full`/`swa` tokens and `reqs` request rows."""
        c, page = self.costs, self.inputs.page_size
        rows = reqs + self.inputs.extra_rows + 1
        out = {"req_to_token": rows * self.inputs.req_to_token_cols * ROW_BYTES}
        if not self._has_swa_pool():
            out["kv_full"] = (full + page) * c.f * c.F
            out["draft_kv_full"] = (full + page) * c.f_d * c.Df
            return out
        if c.F == 0:  # all-SWA: one pool, addressed through an identity map
            out["kv_swa"] = (swa + page) * c.s * c.S
            out["swa_index_map"] = (swa + page + 1) * MAP_BYTES
            out["draft_kv_full"] = (swa + page) * c.f_d * c.Df
            out["draft_kv_swa"] = (swa + page) * c.s_d * (c.Ds + c.Dsf)
            return out
        out["kv_full"] = (full + page) * c.f * c.F
        out["kv_swa"] = (swa + page) * c.s * c.S
        out["swa_index_map"] = (full + page + 1) * MAP_BYTES
        out["draft_kv_full"] = (full + page) * c.f_d * c.Df + (full + page) * c.s_d * c.Dsf
        out["draft_kv_swa"] = (swa + page) * c.s_d * c.Ds
        out["draft_index_maps"] = (full + page + 1) * MAP_BYTES * c.draft_index_maps
        return out

    def _bytes(self, full: int, swa: int, reqs: int) -> int:
        return sum(self.pool_bytes(full, swa, reqs).values())

    # ---- sizing ------------------------------------------------------------------------
    def _per_token(self) -> tuple[int, int]:
        """Bytes per full-pool token and per SWA-pool token, padding and table excluded."""
        c = self.costs
        return c.f * c.F + c.f_d * c.Df, 0

    def _sizes(self, avail: int) -> tuple[int, int]:
        """`(full, swa)` page-aligned token counts for `avail` bytes of per-token cost."""
        per_full, _ = self._per_token()
        full = align(avail // per_full, self.inputs.page_size)
        return full, 0

    def calculate_pool_sizes_from_max_tokens(self, max_tokens: int, page_size: int) -> tuple[int, int]:
        """`(full, swa)` for a user cap of `max_tokens` tokens (max_total_tokens)."""
        return align(max_tokens, page_size), 0

    def _min_sizes(self) -> tuple[int, int]:
        """The smallest `(full, swa)` plan that is usable."""
        return self.inputs.page_size, 0

    def _max_total(self, full: int, swa: int) -> int:
        return full

    def _validate(self, full: int, swa: int) -> None:
        return None

    def _default_reqs(self, tokens: int, budget: int) -> int:
        i = self.inputs
        by_context = tokens * REQS_PER_CONTEXT // max(i.context_len, 1)
        by_bytes = budget // REQ_TABLE_SHARE // (i.req_to_token_cols * ROW_BYTES) - 1 - i.extra_rows
        by_pages = tokens // i.page_size
        return max(1, min(MAX_NUM_REQS, by_context, by_bytes, by_pages))

    def _solve(self, budget: int, reqs: int) -> tuple[int, int]:
        """Largest sizes whose bytes fit `budget`; fixed costs are the sizes-0 plan's bytes."""
        fixed = self._bytes(0, 0, reqs)
        full, swa = self._sizes(max(0, budget - fixed))
        page = self.inputs.page_size
        while (full or swa) and self._bytes(full, swa, reqs) > budget:  # float rounding of the ratio
            full, swa = self._sizes_after_shrink(full, swa, page)
        return full, swa

    def _sizes_after_shrink(self, full: int, swa: int, page: int) -> tuple[int, int]:
        return max(0, full - page), 0

    def min_mem_fraction_static(self, budget: int) -> float:
        """The smallest mem_fraction_static whose budget holds the smallest usable plan (rounded up)."""
        full, swa = self._min_sizes()
        need = self._bytes(full, swa, self.inputs.max_running_requests or 1)
        frac = self.inputs.mem_fraction_static * need / max(budget, 1)
        return math.ceil(frac * 100) / 100

    def plan(self, budget: int, *, budget_flag: str | None = None) -> MemoryPoolConfig:
        """Size every pool for `budget` bytes.

        `budget_flag` names the flag that set `budget` explicitly (`--available-memory`);
        None means the budget is device memory times mem_fraction_static. Raises
        InsufficientMemoryError when not even one page fits, with the fix that applies:
        the smallest budget for the flag, or the smallest mem_fraction_static. Raises
        PlanError when the SWA pool cannot hold a window plus a page.
        """
        i, page = self.inputs, self.inputs.page_size
        if i.max_running_requests is not None:
            reqs = i.max_running_requests
        else:
            full0, swa0 = self._solve(budget, 1)
            reqs = self._default_reqs(self._max_total(full0, swa0), budget)
        full, swa = self._solve(budget, reqs)
        if self._max_total(full, swa) < page:
            self._not_enough(budget, budget_flag)
        capped = False
        if i.max_total_tokens is not None and i.max_total_tokens < self._max_total(full, swa):
            full, swa = self.calculate_pool_sizes_from_max_tokens(i.max_total_tokens, page)
            capped = True
            if self._max_total(full, swa) < page:
                raise PlanError(
                    f"max_total_tokens {i.max_total_tokens} is less than one page ({page}) -- raise --max-total-tokens"
                )
        try:
            self._validate(full, swa)
        except PlanError as exc:
            if self._bytes(*self._min_sizes(), reqs) > budget:
                self._not_enough(budget, budget_flag)
            raise exc from None
        pools = self.pool_bytes(full, swa, reqs)
        return MemoryPoolConfig(
            configurator=self.name,
            page_size=page,
            kv_cache_dtype=i.kv_cache_dtype,
            max_total_num_tokens=self._max_total(full, swa),
            full_max_total_num_tokens=full,
            swa_max_total_num_tokens=swa,
            max_num_reqs=reqs,
            req_to_token_shape=(reqs + i.extra_rows + 1, i.req_to_token_cols),
            costs=self.costs,
            pool_bytes=tuple(pools.items()),
            budget_bytes=budget,
            capped=capped,
            max_draft_tokens=i.max_draft_tokens,
            alloc_len_per_decode=i.alloc_len_per_decode,
            extra_context_len=i.extra_context_len,
        )

    def _not_enough(self, budget: int, budget_flag: str | None) -> None:
        full, swa = self._min_sizes()
        need = self._bytes(full, swa, self.inputs.max_running_requests or 1)
        if budget_flag is not None:
            # mem_fraction_static does not scale an explicit budget: name the budget that fits
            msg = (
                f"the KV cache needs at least {need} bytes, the budget is {budget} bytes (from {budget_flag}) "
                f"-- raise {budget_flag} to at least {need} bytes ({gib_at_least(need)}GiB)"
            )
            path = "$." + budget_flag.strip("-=").replace("-", "_")
            raise InsufficientMemoryError(msg, min_budget_bytes=need, path=path)
        frac = self.min_mem_fraction_static(budget)
        hint = (
            f"raise --mem-fraction-static to at least {frac}"
            if frac < 1
            else "no mem_fraction_static fits: use a device with more memory, a smaller --context-length or --kv-cache-dtype"
        )
        msg = (
            f"the KV cache needs at least {need} bytes, the budget is {budget} bytes "
            f"(mem_fraction_static {self.inputs.mem_fraction_static}) -- {hint}"
        )
        raise InsufficientMemoryError(msg, min_mem_fraction_static=frac, min_budget_bytes=need)


class DefaultPoolConfigurator(PoolConfigurator):
    """Every layer (and every draft layer) holds every token: `cell = f*L + f_d*D`."""

    name: ClassVar[str] = "default"


class HybridSWAPoolConfigurator(PoolConfigurator):
    """Full layers hold every token; sliding-window layers `swa_full_tokens_ratio` of them.

    `full = align(bytes // (f*(F+Df) + s*Dsf + r*s*(S+Ds)))`, `swa = align(int(full*r))`;
    max_total = full. An all-SWA model (F = 0) has one pool: swa = max_total, full = 0.
    """

    name: ClassVar[str] = "hybrid_swa"

    def _has_swa_pool(self) -> bool:
        return True

    def _per_token(self) -> tuple[int, int]:
        c = self.costs
        if c.F == 0:
            return 0, c.s * c.S + c.f_d * c.Df + c.s_d * (c.Ds + c.Dsf) + MAP_BYTES
        per_full = c.f * c.F + c.f_d * c.Df + c.s_d * c.Dsf + MAP_BYTES * (1 + c.draft_index_maps)
        return per_full, c.s * c.S + c.s_d * c.Ds

    def _sizes(self, avail: int) -> tuple[int, int]:
        page, r = self.inputs.page_size, self.inputs.swa_full_tokens_ratio
        per_full, per_swa = self._per_token()
        if self.costs.F == 0:
            return 0, align(avail // per_swa, page)
        full = align(avail // (per_full + r * per_swa), page)
        return full, align(int(full * r), page)

    def _sizes_after_shrink(self, full: int, swa: int, page: int) -> tuple[int, int]:
        if self.costs.F == 0:
            return 0, max(0, swa - page)
        full = max(0, full - page)
        return full, align(int(full * self.inputs.swa_full_tokens_ratio), page)

    def calculate_pool_sizes_from_max_tokens(self, max_tokens: int, page_size: int) -> tuple[int, int]:
        if self.costs.F == 0:
            return 0, align(max_tokens, page_size)
        full = align(max_tokens, page_size)
        return full, align(int(full * self.inputs.swa_full_tokens_ratio), page_size)

    def _max_total(self, full: int, swa: int) -> int:
        return swa if self.costs.F == 0 else full

    def _window(self) -> int:
        return int(self.shape.sliding_window or 0)

    def _validate(self, full: int, swa: int) -> None:
        validate_swa_pool_size(swa, self._window(), self.inputs.page_size, self.inputs.swa_full_tokens_ratio)

    def _min_sizes(self) -> tuple[int, int]:
        page, r = self.inputs.page_size, self.inputs.swa_full_tokens_ratio
        swa = align_up(self._window() + page + 1, page)
        if self.costs.F == 0:
            return 0, swa
        full = align_up(math.ceil(swa / r), page)
        while align(int(full * r), page) < swa:
            full += page
        return full, align(int(full * r), page)


class SWAChunkCapPoolConfigurator(HybridSWAPoolConfigurator):
    """Without a radix cache the SWA pool holds only what live requests can reach.

    `per_req = window + Dt + page + alloc_len_per_decode`; the SWA pool is fixed at
    `per_req*max_running_requests + chunked_prefill_size + page` (decode disaggregation:
    plus `(window + page)*extra_slots`), page-aligned up; the full pool gets the rest.
    """

    name: ClassVar[str] = "swa_chunk_cap"

    def swa_cap(self) -> int:
        i, page = self.inputs, self.inputs.page_size
        window = self._window()
        per_req = window + i.max_draft_tokens + page + i.alloc_len_per_decode
        cap = (
            per_req * int(i.max_running_requests or 0)
            + PREFILL_CHUNKS_IN_FLIGHT * int(i.chunked_prefill_size or 0)
            + page
        )
        if i.disaggregation_mode == "decode":
            cap += (window + page) * i.decode_extra_slots
        return align_up(cap, page)

    def _sizes(self, avail: int) -> tuple[int, int]:
        page = self.inputs.page_size
        per_full, per_swa = self._per_token()
        swa = self.swa_cap()
        full = align((avail - per_swa * swa) // per_full, page) if avail > per_swa * swa else 0
        if full < swa:  # the cap is more than a full pool could use: split evenly instead
            full = swa = align(avail // (per_full + per_swa), page)
        return full, swa

    def _sizes_after_shrink(self, full: int, swa: int, page: int) -> tuple[int, int]:
        full = max(0, full - page)
        return full, min(swa, full)

    def calculate_pool_sizes_from_max_tokens(self, max_tokens: int, page_size: int) -> tuple[int, int]:
        full = align(max_tokens, page_size)
        return full, min(self.swa_cap(), full)

    def _min_sizes(self) -> tuple[int, int]:
        swa = self.swa_cap()
        return swa, swa


def choose_pool_configurator(shape: ModelShape, inputs: PlanInputs) -> type[PoolConfigurator]:
    """Default without SWA layers (or with hybrid SWA memory disabled); chunk cap when
    max_running_requests, chunked_prefill_size and a window are set and the radix cache
    is off on a model with full layers too; hybrid SWA otherwise."""
    if not shape.has_swa_layers(disable_hybrid_swa_memory=inputs.disable_hybrid_swa_memory):
        return DefaultPoolConfigurator
    if (
        shape.full_attention_layer_ids
        and inputs.max_running_requests
        and inputs.chunked_prefill_size
        and shape.sliding_window
        and inputs.disable_radix_cache
    ):
        return SWAChunkCapPoolConfigurator
    return HybridSWAPoolConfigurator


__all__ = [
    "DRAFT_KV_ALGORITHMS",
    "DefaultPoolConfigurator",
    "HybridSWAPoolConfigurator",
    "LayerCosts",
    "MemoryPoolConfig",
    "PlanInputs",
    "PoolConfigurator",
    "SWAChunkCapPoolConfigurator",
    "align",
    "align_up",
    "choose_pool_configurator",
    "gib_at_least",
    "validate_swa_pool_size",
]
