"""The pool configurators over hand-computed plans: every branch, each budget just below and at its boundary.

Plans are built from hand-picked layer costs (not from a model), so each expected number
can be checked with pencil and paper; the comments show the arithmetic. Without
speculative decoding a req-to-token row is context_len + 4 columns of 4 bytes.
"""

from __future__ import annotations

from typing import Any

import pytest

from mem_cache.errors import InsufficientMemoryError, PlanError
from mem_cache.model_shape import ModelShape
from mem_cache.pool_configurator import (
    DefaultPoolConfigurator,
    HybridSWAPoolConfigurator,
    LayerCosts,
    PlanInputs,
    SWAChunkCapPoolConfigurator,
    align,
    align_up,
    choose_pool_configurator,
    gib_at_least,
    validate_swa_pool_size,
)


def shape(
    *, full: tuple[int, ...] = (0, 1), swa: tuple[int, ...] = (), window: int | None = None, **kw: Any
) -> ModelShape:
    return ModelShape(
        num_hidden_layers=len(full) + len(swa),
        num_attention_heads=1,
        num_key_value_heads=kw.pop("kv_heads", 1),
        head_dim=2,
        v_head_dim=2,
        swa_attention_layer_ids=swa,
        full_attention_layer_ids=full,
        sliding_window=window,
        **kw,
    )


def inputs(**kw: Any) -> PlanInputs:
    base: dict[str, Any] = {
        "page_size": 1,
        "kv_cache_dtype": "bfloat16",
        "context_len": 96,
        "swa_full_tokens_ratio": 0.5,
        "mem_fraction_static": 0.5,
    }
    return PlanInputs(**{**base, **kw})


DENSE = LayerCosts(f=10, s=10, F=2, S=0)  # 20 bytes a token
HYBRID = LayerCosts(f=10, s=10, F=1, S=3)  # per full token 10 + 8 (map) = 18; per SWA token 30


def plan(cls: type, costs: LayerCosts, budget: int, *, window: int | None = None, flag: str | None = None, **kw: Any):
    swa = (1, 2, 3) if costs.S else ()
    full = tuple(range(costs.F)) if costs.S else (0, 1)
    return cls(shape(full=full, swa=swa, window=window), costs, inputs(**kw)).plan(budget, budget_flag=flag)


# ---- default ------------------------------------------------------------------------------
# 3 requests: 4 rows * 100 cols * 4 B = 1600 B; plus one padding page of 20 B a token.
DEFAULT_PLANS = [
    # (page, budget, full): page 1: fixed 1620, full = (budget - 1620) // 20
    (1, 3620, 100),
    (1, 3619, 99),
    # page 4: fixed 1600 + 4*20 = 1680; (3680 - 1680) // 20 = 100; one byte less: 99 -> 96
    (4, 3680, 100),
    (4, 3679, 96),
    # the smallest plan is one page: 1680 + 4*20 = 1760
    (4, 1760, 4),
]


@pytest.mark.parametrize(("page", "budget", "full"), DEFAULT_PLANS)
def test_default_plans(page: int, budget: int, full: int) -> None:
    """Tokens are whole pages of what the budget holds after the request table and the padding page."""
    p = plan(DefaultPoolConfigurator, DENSE, budget, page_size=page, max_running_requests=3)
    assert (p.max_total_num_tokens, p.full_max_total_num_tokens, p.swa_max_total_num_tokens) == (full, full, 0)
    assert p.bytes_by_pool() == {"req_to_token": 1600, "kv_full": (full + page) * 20, "draft_kv_full": 0}
    assert p.total_bytes <= budget and p.req_to_token_shape == (4, 100) and p.max_num_reqs == 3
    assert (p.configurator, p.uses_swa_pool, p.capped) == ("default", False, False)


def test_default_plan_with_draft_layers() -> None:
    """Draft layers hold every token too: 2 draft layers of 5 B add 10 B a token."""
    costs = LayerCosts(f=10, s=10, F=2, S=0, f_d=5, Df=2)
    # fixed 1600 + 30; (4630 - 1630) // 30 = 100
    p = plan(DefaultPoolConfigurator, costs, 4630, max_running_requests=3)
    assert p.max_total_num_tokens == 100
    assert p.bytes_by_pool() == {"req_to_token": 1600, "kv_full": 101 * 20, "draft_kv_full": 101 * 10}
    assert p.total_bytes == 4630


def test_default_plan_one_byte_short_of_a_page() -> None:
    """Below the one-page plan the error names the smallest budget, for the flag or as a fraction."""
    with pytest.raises(InsufficientMemoryError) as info:
        plan(DefaultPoolConfigurator, DENSE, 1759, page_size=4, max_running_requests=3, flag="--available-memory")
    err = info.value
    assert (err.min_budget_bytes, err.min_mem_fraction_static) == (1760, None)
    assert err.lines() == [
        "$.available_memory: the KV cache needs at least 1760 bytes, the budget is 1759 bytes (from --available-memory) "
        "-- raise --available-memory to at least 1760 bytes (0.01GiB)"
    ]
    with pytest.raises(InsufficientMemoryError) as info:
        plan(DefaultPoolConfigurator, DENSE, 1759, page_size=4, max_running_requests=3)
    # 0.5 * 1760 / 1759 = 0.50028 -> rounded up to 0.51
    assert info.value.min_mem_fraction_static == 0.51
    assert info.value.lines() == [
        "$.schedule.mem_fraction_static: the KV cache needs at least 1760 bytes, the budget is 1759 bytes "
        "(mem_fraction_static 0.5) -- raise --mem-fraction-static to at least 0.51"
    ]
    with pytest.raises(InsufficientMemoryError) as info:
        plan(DefaultPoolConfigurator, DENSE, 160, page_size=4, max_running_requests=3)
    # 0.5 * 1760 / 160 = 5.5: no fraction fits
    assert info.value.min_mem_fraction_static == 5.5
    assert (
        "-- no mem_fraction_static fits: use a device with more memory, a smaller --context-length or --kv-cache-dtype"
        in str(info.value)
    )


def test_max_total_tokens_caps_the_plan() -> None:
    """A cap below what fits wins (aligned to pages); a cap at or above it changes nothing; below a page is refused."""
    p = plan(DefaultPoolConfigurator, DENSE, 3680, page_size=4, max_running_requests=3, max_total_tokens=50)
    assert (p.max_total_num_tokens, p.capped) == (48, True)
    assert p.bytes_by_pool()["kv_full"] == 52 * 20
    p = plan(DefaultPoolConfigurator, DENSE, 3680, page_size=4, max_running_requests=3, max_total_tokens=100)
    assert (p.max_total_num_tokens, p.capped) == (100, False)
    with pytest.raises(PlanError) as info:
        plan(DefaultPoolConfigurator, DENSE, 3680, page_size=4, max_running_requests=3, max_total_tokens=3)
    assert info.value.lines() == ["$: max_total_tokens 3 is less than one page (4) -- raise --max-total-tokens"]


# ---- default number of requests: the smallest of four bounds ----------------------------------
REQS = [
    # by bytes: (B // 16) // 4096 - 1 = 10 (ctx 1020: 1024 cols of 4 B; 20 B a token)
    ({"context_len": 1020}, DENSE, 16 * 4096 * 11, 1, 10, (720896 - 11 * 4096 - 20) // 20),
    # by context: 40000 B a token: 1 request leaves (40e6 - 8192 - 40000) // 40000 = 998 tokens,
    # 998 * 512 // 1020 = 500 beats by bytes 40e6 // 16 // 4096 - 1 = 609
    (
        {"context_len": 1020},
        LayerCosts(f=20000, s=0, F=2, S=0),
        40_000_000,
        1,
        500,
        (40_000_000 - 501 * 4096 - 40000) // 40000,
    ),
    # by pages: page 16, ctx 92 (96 cols): 1 request leaves align(3359232 // 40000 = 83) = 80 tokens = 5 pages
    ({"context_len": 92, "page_size": 16}, LayerCosts(f=20000, s=0, F=2, S=0), 4_000_000, 16, 5, 80),
    # at most 4096: by bytes would be 64 MiB // 16 // 384 - 1 = 10921
    ({"context_len": 92}, DENSE, 64 << 20, 1, 4096, ((64 << 20) - 4097 * 384 - 20) // 20),
    # at least 1: by bytes is 3620 // 16 // 400 - 1 = -1
    ({}, DENSE, 3620, 1, 1, (3620 - 800 - 20) // 20),
    # decode extra rows count against by bytes: 16 * 4096 * 11 // 16 // 4096 - 1 - 2 = 8, and the table has 8 + 2 + 1 rows
    (
        {"context_len": 1020, "disaggregation_mode": "decode", "decode_extra_slots": 2},
        DENSE,
        16 * 4096 * 11,
        1,
        8,
        (720896 - 11 * 4096 - 20) // 20,
    ),
]


@pytest.mark.parametrize(("kw", "costs", "budget", "page", "reqs", "full"), REQS)
def test_default_request_count(
    kw: dict[str, Any], costs: LayerCosts, budget: int, page: int, reqs: int, full: int
) -> None:
    """Without max_running_requests the rows are the smallest of: per context, the table's 1/16 share, pages, 4096; at least 1."""
    p = plan(DefaultPoolConfigurator, costs, budget, **kw)
    assert (p.max_num_reqs, p.max_total_num_tokens) == (reqs, full)
    assert p.req_to_token_shape[0] == reqs + kw.get("decode_extra_slots", 0) + 1


# ---- hybrid SWA -----------------------------------------------------------------------------
# 1 request: 2 rows * 100 cols * 4 B = 800 B; padding: 10 (full) + 30 (SWA) + 2 map entries * 8 = 56.
# full = budget left // (18 + 0.5 * 30 = 33); swa = int(full * 0.5).
HYBRID_PLANS = [
    (4156, 100, 50),  # (4156 - 856) // 33 = 100
    (4155, 99, 49),  # 3299 // 33 = 99.97
]


@pytest.mark.parametrize(("budget", "full", "swa"), HYBRID_PLANS)
def test_hybrid_plans(budget: int, full: int, swa: int) -> None:
    """Full layers hold every token, SWA layers the ratio of them, and the index map one entry a full slot."""
    p = plan(HybridSWAPoolConfigurator, HYBRID, budget, window=8, max_running_requests=1)
    assert (p.max_total_num_tokens, p.full_max_total_num_tokens, p.swa_max_total_num_tokens) == (full, full, swa)
    assert p.bytes_by_pool() == {
        "req_to_token": 800,
        "kv_full": (full + 1) * 10,
        "kv_swa": (swa + 1) * 30,
        "swa_index_map": (full + 2) * 8,
        "draft_kv_full": 0,
        "draft_kv_swa": 0,
        "draft_index_maps": 0,
    }
    assert p.total_bytes <= budget and (p.configurator, p.uses_swa_pool) == ("hybrid_swa", True)


def test_hybrid_plan_with_draft_layers() -> None:
    """A full draft layer, a shared-map SWA draft layer and a full-capacity ring each cost what they hold."""
    costs = LayerCosts(f=10, s=10, F=1, S=3, f_d=4, s_d=6, Df=1, Ds=1, Dsf=2)
    # per full token 10 + 4 + 2*6 + 8*(1 + 1) = 42; per SWA token 30 + 6 = 36; r 0.5 -> 60 a full token;
    # fixed: the table, one padding page of each pool (10, 30, 4, 12, 6) and two entries of each map
    p = plan(
        HybridSWAPoolConfigurator,
        costs,
        800 + 10 + 30 + 16 + 4 + 12 + 6 + 16 + 60 * 100,
        window=8,
        max_running_requests=1,
    )
    assert (p.full_max_total_num_tokens, p.swa_max_total_num_tokens) == (100, 50)
    assert p.bytes_by_pool() == {
        "req_to_token": 800,
        "kv_full": 101 * 10,
        "kv_swa": 51 * 30,
        "swa_index_map": 102 * 8,
        "draft_kv_full": 101 * 4 + 101 * 6 * 2,
        "draft_kv_swa": 51 * 6,
        "draft_index_maps": 102 * 8,
    }
    assert p.describe()["draft_layers"] == {"full": 1, "swa": 1, "swa_full_capacity": 2}


def test_all_swa_plan() -> None:
    """An all-SWA model has one pool: swa is the whole plan and full is 0."""
    costs = LayerCosts(f=10, s=10, F=0, S=3)
    # per token 30 + 8 (map); fixed 800 + 30 + 2 * 8 = 846; (846 + 38 * 100 - 846) // 38 = 100
    p = HybridSWAPoolConfigurator(shape(full=(), swa=(0, 1, 2), window=8), costs, inputs(max_running_requests=1)).plan(
        846 + 3800
    )
    assert (p.max_total_num_tokens, p.full_max_total_num_tokens, p.swa_max_total_num_tokens) == (100, 0, 100)
    assert p.bytes_by_pool()["kv_swa"] == 101 * 30 and p.bytes_by_pool()["swa_index_map"] == 102 * 8
    p = HybridSWAPoolConfigurator(shape(full=(), swa=(0, 1, 2), window=8), costs, inputs(max_running_requests=1)).plan(
        846 + 3799
    )
    assert p.max_total_num_tokens == 99
    p = HybridSWAPoolConfigurator(
        shape(full=(), swa=(0, 1, 2), window=8), costs, inputs(max_running_requests=1, max_total_tokens=40, page_size=4)
    )
    capped = p.plan(10_000)
    assert (
        capped.max_total_num_tokens,
        capped.swa_max_total_num_tokens,
        capped.full_max_total_num_tokens,
        capped.capped,
    ) == (40, 40, 0, True)


def test_hybrid_cap_keeps_the_ratio() -> None:
    """max_total_tokens caps the full pool and the SWA pool follows at the ratio."""
    p = plan(HybridSWAPoolConfigurator, HYBRID, 4156, window=8, max_running_requests=1, max_total_tokens=60)
    assert (p.full_max_total_num_tokens, p.swa_max_total_num_tokens, p.capped) == (60, 30, True)


def test_hybrid_window_boundary() -> None:
    """The SWA pool must exceed one window plus a page: 50 tokens hold a window of 48, not 49."""
    assert (
        plan(HybridSWAPoolConfigurator, HYBRID, 4156, window=48, max_running_requests=1).swa_max_total_num_tokens == 50
    )
    # 49 + 1 >= 50, and the smallest plan (swa 51, full 102: 856 + 102*18 + 51*30 = 4222 B) does not fit 4156 B
    with pytest.raises(InsufficientMemoryError) as info:
        plan(HybridSWAPoolConfigurator, HYBRID, 4156, window=49, max_running_requests=1, flag="--available-memory")
    assert info.value.min_budget_bytes == 4222
    # when the smallest plan fits but a cap leaves the SWA pool too small, the window is what is named
    with pytest.raises(PlanError) as plan_info:
        plan(HybridSWAPoolConfigurator, HYBRID, 4222, window=48, max_running_requests=1, max_total_tokens=60)
    assert not isinstance(plan_info.value, InsufficientMemoryError)
    assert plan_info.value.lines() == [
        "$: the SWA pool of 30 tokens cannot hold one sliding window (48) plus a page (1) "
        "-- raise swa_full_tokens_ratio (now 0.5) or the memory for the KV cache"
    ]


def test_hybrid_smallest_plan_grows_full_until_the_ratio_reaches_the_window() -> None:
    """At ratio 0.29, 100 full tokens give int(28.99..) = 28 SWA tokens, so the smallest plan needs 101."""
    cfg = HybridSWAPoolConfigurator(
        shape(full=(0,), swa=(1, 2, 3), window=27), HYBRID, inputs(swa_full_tokens_ratio=0.29, max_running_requests=1)
    )
    # swa >= 27 + 1 + 1 = 29; full = ceil(29 / 0.29) = 100 -> 28, so 101 -> 29
    need = 856 + 101 * 18 + 29 * 30
    with pytest.raises(InsufficientMemoryError) as info:
        cfg.plan(need - 1, budget_flag="--available-memory")
    assert info.value.min_budget_bytes == need
    # page 16, window 100, ratio 0.3: swa = align_up(117, 16) = 128; full = align_up(427, 16) = 432 -> 129 -> 128
    cfg = HybridSWAPoolConfigurator(
        shape(full=(0,), swa=(1, 2, 3), window=100),
        HYBRID,
        inputs(swa_full_tokens_ratio=0.3, page_size=16, max_running_requests=1),
    )
    with pytest.raises(InsufficientMemoryError) as info:
        cfg.plan(1000, budget_flag="--available-memory")
    assert info.value.min_budget_bytes == 800 + 16 * 10 + 16 * 30 + 17 * 8 + 432 * 18 + 128 * 30


def test_all_swa_smallest_plan() -> None:
    """An all-SWA model's smallest plan is a window plus a page plus one, page-aligned up."""
    cfg = HybridSWAPoolConfigurator(
        shape(full=(), swa=(0, 1, 2), window=8),
        LayerCosts(f=10, s=10, F=0, S=3),
        inputs(page_size=4, max_running_requests=1),
    )
    # swa = align_up(8 + 4 + 1, 4) = 16: 800 + 4*30 + 5*8 + 16*38
    with pytest.raises(InsufficientMemoryError) as info:
        cfg.plan(100, budget_flag="--available-memory")
    assert info.value.min_budget_bytes == 800 + 120 + 40 + 16 * 38


# ---- chunk cap ------------------------------------------------------------------------------
# window 8, 2 requests, chunk 16, no speculation: per request 8 + 0 + 1 + 1 = 10; cap 2*10 + 16 + 1 = 37.
# 2 requests: 3 rows * 400 B = 1200; padding 10 + 30 + 16 -> fixed 1256.
CHUNK = {"max_running_requests": 2, "chunked_prefill_size": 16, "disable_radix_cache": True}
CHUNK_PLANS = [
    # full = (budget - 1256 - 37*30) // 18
    (1256 + 1110 + 1800, 100, 37),
    (1256 + 1110 + 1799, 99, 37),
    # full reaches the cap: 37 >= 37 keeps the cap
    (1256 + 1110 + 18 * 37, 37, 37),
    # one byte less: full 36 < 37, so both pools split what is left evenly: 1775 // 48 = 36
    (1256 + 1110 + 18 * 37 - 1, 36, 36),
    # not even the cap's SWA bytes: 1110 // 48 = 23 each
    (1256 + 1110, 23, 23),
]


@pytest.mark.parametrize(("budget", "full", "swa"), CHUNK_PLANS)
def test_chunk_cap_plans(budget: int, full: int, swa: int) -> None:
    """The SWA pool is fixed at what live requests reach; the full pool gets the rest (or both split it)."""
    p = plan(SWAChunkCapPoolConfigurator, HYBRID, budget, window=8, **CHUNK)
    assert (p.max_total_num_tokens, p.full_max_total_num_tokens, p.swa_max_total_num_tokens) == (full, full, swa)
    assert p.total_bytes <= budget and p.configurator == "swa_chunk_cap"


def test_chunk_cap_decode_extra_slots_and_speculation() -> None:
    """Decode mode adds (window + page) a extra slot; speculation adds the draft tokens and a decode's allocation."""
    cfg = SWAChunkCapPoolConfigurator(shape(full=(0,), swa=(1, 2, 3), window=8), HYBRID, inputs(**CHUNK))
    assert cfg.swa_cap() == 37
    decode = SWAChunkCapPoolConfigurator(
        shape(full=(0,), swa=(1, 2, 3), window=8),
        HYBRID,
        inputs(**CHUNK, disaggregation_mode="decode", decode_extra_slots=2),
    )
    assert decode.swa_cap() == 37 + 9 * 2
    extra_elsewhere = SWAChunkCapPoolConfigurator(
        shape(full=(0,), swa=(1, 2, 3), window=8),
        HYBRID,
        inputs(**CHUNK, disaggregation_mode="prefill", decode_extra_slots=2),
    )
    assert extra_elsewhere.swa_cap() == 37
    # EAGLE steps 2 topk 1, Dt 3: per decode max(2, 3) = 3; per request 8 + 3 + 1 + 3 = 15; 30 + 16 + 1 = 47
    spec = SWAChunkCapPoolConfigurator(
        shape(full=(0,), swa=(1, 2, 3), window=8),
        HYBRID,
        inputs(**CHUNK, speculative_algorithm="EAGLE", num_steps=2, topk=1, max_draft_tokens=3),
    )
    assert spec.swa_cap() == 47
    # page 4: per request 8 + 0 + 4 + 1 = 13; 26 + 16 + 4 = 46 -> 48
    paged = SWAChunkCapPoolConfigurator(shape(full=(0,), swa=(1, 2, 3), window=8), HYBRID, inputs(**CHUNK, page_size=4))
    assert paged.swa_cap() == 48
    p = decode.plan(100_000)
    assert p.swa_max_total_num_tokens == 55 and p.req_to_token_shape == (2 + 2 + 1, 100)


def test_chunk_cap_caps_and_errors() -> None:
    """A token cap below the SWA cap lowers both; too little memory names the cap plan's bytes."""
    p = plan(SWAChunkCapPoolConfigurator, HYBRID, 4166, window=8, max_total_tokens=50, **CHUNK)
    assert (p.full_max_total_num_tokens, p.swa_max_total_num_tokens, p.capped) == (50, 37, True)
    p = plan(SWAChunkCapPoolConfigurator, HYBRID, 4166, window=8, max_total_tokens=20, **CHUNK)
    assert (p.full_max_total_num_tokens, p.swa_max_total_num_tokens) == (20, 20)
    # the smallest plan is the cap in both pools: 1256 + 37 * 48 = 3032; 47 B split leaves 0 tokens
    with pytest.raises(InsufficientMemoryError) as info:
        plan(SWAChunkCapPoolConfigurator, HYBRID, 1256 + 47, window=8, flag="--available-memory", **CHUNK)
    assert info.value.min_budget_bytes == 3032
    # a window of 30 (cap 2*32 + 16 + 1 = 81) in an even split of 31 tokens: the window does not fit, and
    # neither does the smallest plan (1256 + 81*48 = 5144 B): InsufficientMemoryError, not PlanError
    with pytest.raises(InsufficientMemoryError) as info:
        plan(SWAChunkCapPoolConfigurator, HYBRID, 1256 + 48 * 31, window=30, flag="--available-memory", **CHUNK)
    assert info.value.min_budget_bytes == 5144


# ---- choice, costs and helpers --------------------------------------------------------------
@pytest.mark.parametrize(
    ("model", "kw", "chosen"),
    [
        (shape(), CHUNK, DefaultPoolConfigurator),
        (shape(full=(0,), swa=(1,), window=8), {**CHUNK, "disable_hybrid_swa_memory": True}, DefaultPoolConfigurator),
        (shape(full=(0,), swa=(1,), window=8), CHUNK, SWAChunkCapPoolConfigurator),
        (shape(full=(0,), swa=(1,), window=8), {**CHUNK, "max_running_requests": None}, HybridSWAPoolConfigurator),
        (shape(full=(0,), swa=(1,), window=8), {**CHUNK, "chunked_prefill_size": None}, HybridSWAPoolConfigurator),
        (shape(full=(0,), swa=(1,), window=8), {**CHUNK, "disable_radix_cache": False}, HybridSWAPoolConfigurator),
        (shape(full=(), swa=(0, 1), window=8), CHUNK, HybridSWAPoolConfigurator),
        (shape(full=(0,), swa=(1,), window=0), CHUNK, HybridSWAPoolConfigurator),
    ],
)
def test_choose_pool_configurator(model: ModelShape, kw: dict[str, Any], chosen: type) -> None:
    """Default without an SWA pool; chunk cap only with every one of its conditions; hybrid otherwise."""
    assert choose_pool_configurator(model, inputs(**kw)) is chosen


def test_layer_costs_of_target_and_draft() -> None:
    """Layer counts and bytes per layer for each kind of target and draft."""
    hybrid = shape(full=(0,), swa=(1, 2), window=8, swa_num_key_value_heads=2)  # f = 1*(2+2)*2 = 8, s = 16
    eagle = inputs(speculative_algorithm="EAGLE")
    assert LayerCosts.of(hybrid, None, eagle) == LayerCosts(f=8, s=16, F=1, S=2)
    dense_draft = shape(full=(0,))
    assert LayerCosts.of(hybrid, dense_draft, inputs()) == LayerCosts(f=8, s=16, F=1, S=2)
    assert LayerCosts.of(hybrid, dense_draft, inputs(speculative_algorithm="FROZEN_KV_MTP")) == LayerCosts(
        f=8, s=16, F=1, S=2
    )
    assert LayerCosts.of(hybrid, dense_draft, eagle) == LayerCosts(f=8, s=16, F=1, S=2, f_d=8, s_d=8, Df=1)
    sliding_draft = shape(full=(0,), swa=(1, 2), window=8)
    assert LayerCosts.of(hybrid, sliding_draft, eagle) == LayerCosts(f=8, s=16, F=1, S=2, f_d=8, s_d=8, Df=1, Ds=2)
    banded = shape(full=(0,), swa=(1, 2), mtp_local_layer_ids=(1, 2))
    costs = LayerCosts.of(hybrid, banded, eagle)
    assert costs == LayerCosts(f=8, s=16, F=1, S=2, f_d=8, s_d=8, Df=1, Dsf=2)
    assert (costs.full_per_token, costs.swa_per_token, costs.draft_per_token, costs.draft_index_maps) == (
        8,
        32,
        8 + 16,
        1,
    )
    # an all-SWA target shares its map: no full-capacity rings
    all_swa = shape(full=(), swa=(0, 1), window=8)
    assert LayerCosts.of(all_swa, banded, eagle) == LayerCosts(f=8, s=8, F=0, S=2, f_d=8, s_d=8, Df=1, Ds=2)
    # a dense target (or hybrid memory off) sizes every draft layer like a full one
    assert LayerCosts.of(shape(), sliding_draft, eagle) == LayerCosts(f=8, s=8, F=2, S=0, f_d=8, s_d=8, Df=3)
    off = inputs(speculative_algorithm="EAGLE", disable_hybrid_swa_memory=True)
    same = shape(full=(0,), swa=(1, 2), window=8)
    assert LayerCosts.of(same, None, off) == LayerCosts(f=8, s=8, F=3, S=0)
    with pytest.raises(PlanError) as info:
        LayerCosts.of(hybrid, None, off)
    assert info.value.lines() == [
        "$: disable_hybrid_swa_memory is set but the SWA layers have their own head geometry (2 heads of 2) "
        "-- keep hybrid SWA memory on for this model"
    ]
    assert LayerCosts(f=1, s=1, F=1, S=1).draft_index_maps == 0


def test_plan_inputs_properties() -> None:
    """Element size, draft KV, decode-only extra rows and the row width."""
    assert inputs(kv_cache_dtype="float32").elt == 4 and inputs(kv_cache_dtype="fp8_e4m3").elt == 1
    assert [
        inputs(speculative_algorithm=a).has_draft_kv
        for a in ("EAGLE", "EAGLE3", "STANDALONE", "NEXTN", "FROZEN_KV_MTP", None)
    ] == [
        True,
        True,
        True,
        True,
        False,
        False,
    ]
    assert inputs(disaggregation_mode="decode", decode_extra_slots=3).extra_rows == 3
    assert inputs(disaggregation_mode="prefill", decode_extra_slots=3).extra_rows == 0
    spec = inputs(num_steps=3, topk=1, max_draft_tokens=4)
    assert (spec.alloc_len_per_decode, spec.extra_context_len, spec.req_to_token_cols) == (4, 8, 104)


def test_describe() -> None:
    """The plan as plain data, with zero-byte pools left out (keys added later may come on top)."""
    p = plan(DefaultPoolConfigurator, DENSE, 3620, max_running_requests=3)
    assert (
        p.describe().items()
        >= {
            "configurator": "default",
            "page_size": 1,
            "kv_cache_dtype": "bfloat16",
            "bytes_per_token": {"full": 20, "swa": 0, "draft": 0},
            "draft_layers": {"full": 0, "swa": 0, "swa_full_capacity": 0},
            "max_total_num_tokens": 100,
            "full_max_total_num_tokens": 100,
            "swa_max_total_num_tokens": 0,
            "max_num_reqs": 3,
            "req_to_token_shape": [4, 100],
            "max_draft_tokens": 0,
            "alloc_len_per_decode": 1,
            "pool_bytes": {"req_to_token": 1600, "kv_full": 2020},
            "total_bytes": 3620,
            "budget_bytes": 3620,
            "capped_by_max_total_tokens": False,
        }.items()
    )


def test_helpers() -> None:
    """Alignment both ways, GiB rounded up to the hundredth, and the window check's boundary."""
    assert [align(n, 4) for n in (-3, 0, 3, 4, 7.9, 8)] == [0, 0, 0, 4, 4, 8]
    assert [align_up(n, 4) for n in (0, 1, 4, 5)] == [0, 4, 4, 8]
    assert [gib_at_least(n) for n in (0, 1, 1 << 30, (1 << 30) + 1, 3 << 29)] == [
        "0.00",
        "0.01",
        "1.00",
        "1.01",
        "1.50",
    ]
    validate_swa_pool_size(10, 8, 1, 0.5)
    with pytest.raises(PlanError, match="the SWA pool of 9 tokens cannot hold one sliding window"):
        validate_swa_pool_size(9, 8, 1, 0.5)


def test_min_mem_fraction_static_rounds_up() -> None:
    """The smallest fraction is the current one scaled by need over budget, rounded up to the hundredth."""
    cfg = DefaultPoolConfigurator(shape(), DENSE, inputs(page_size=4, max_running_requests=3))
    assert cfg.min_mem_fraction_static(1760) == 0.5
    assert cfg.min_mem_fraction_static(3520) == 0.25
    assert cfg.min_mem_fraction_static(0) == 880.0
    # without max_running_requests the smallest plan has one request row: 2 * 400 + 8 * 20 = 960
    assert DefaultPoolConfigurator(shape(), DENSE, inputs(page_size=4)).min_mem_fraction_static(960) == 0.5


# ---- edges the plans above do not reach -------------------------------------------------------
def test_defaults_of_plan_inputs_and_layer_costs() -> None:
    """Unset inputs mean: radix cache on, no extra decode slots; unset draft costs are zero."""
    i = PlanInputs(
        page_size=1, kv_cache_dtype="bfloat16", context_len=96, swa_full_tokens_ratio=0.5, mem_fraction_static=0.5
    )
    assert (i.disable_radix_cache, i.decode_extra_slots, i.disaggregation_mode, i.max_draft_tokens) == (
        False,
        0,
        "null",
        0,
    )
    c = LayerCosts(f=1, s=1, F=1, S=1)
    assert (c.f_d, c.s_d, c.Df, c.Ds, c.Dsf) == (0, 0, 0, 0, 0)
    # so without a word about the radix cache a hybrid with limits is not chunk-capped
    limits = {"max_running_requests": 2, "chunked_prefill_size": 16}
    assert choose_pool_configurator(shape(full=(0,), swa=(1,), window=8), inputs(**limits)) is HybridSWAPoolConfigurator


def test_all_swa_plan_with_draft_layers() -> None:
    """An all-SWA target sizes every draft layer by the one pool: full draft layers and SWA ones alike."""
    costs = LayerCosts(f=10, s=10, F=0, S=3, f_d=4, s_d=6, Df=1, Ds=1, Dsf=1)
    # per token 30 + 4 + 6*2 + 8 = 54; fixed 800 + 30 + 2*8 + 4 + 12 = 862
    cfg = HybridSWAPoolConfigurator(shape(full=(), swa=(0, 1, 2), window=8), costs, inputs(max_running_requests=1))
    p = cfg.plan(862 + 54 * 100)
    assert p.swa_max_total_num_tokens == 100
    assert p.bytes_by_pool() == {
        "req_to_token": 800,
        "kv_swa": 101 * 30,
        "swa_index_map": 102 * 8,
        "draft_kv_full": 101 * 4,
        "draft_kv_swa": 101 * 12,
    }
    assert cfg.plan(862 + 54 * 100 - 1).swa_max_total_num_tokens == 99


def test_a_budget_below_the_fixed_costs_plans_nothing() -> None:
    """With 1 byte a token, a budget one byte below the table and padding still fits no token."""
    costs = LayerCosts(f=1, s=0, F=1, S=0)
    cfg = DefaultPoolConfigurator(shape(), costs, inputs(max_running_requests=3))
    # fixed 1600 + 1: one token more needs 1602
    with pytest.raises(InsufficientMemoryError):
        cfg.plan(1600)
    assert cfg.plan(1602).max_total_num_tokens == 1


def test_default_request_count_is_judged_on_a_one_request_plan() -> None:
    """The default row count comes from the tokens of a one-row plan, then the plan is made with those rows."""
    costs = LayerCosts(f=20000, s=0, F=2, S=0)
    # page 16, ctx 92 (384 B a row): one row leaves (4480768 - 768 - 640000) // 40000 = 96 tokens = 6 pages
    # (two rows would leave 95 -> 80 tokens = 5 pages); 6 rows then leave 95 -> 80 tokens
    p = DefaultPoolConfigurator(shape(), costs, inputs(context_len=92, page_size=16)).plan(4_480_768)
    assert (p.max_num_reqs, p.max_total_num_tokens) == (6, 80)


def test_a_cap_of_exactly_one_page_is_a_plan() -> None:
    """max_total_tokens equal to one page is accepted."""
    p = plan(DefaultPoolConfigurator, DENSE, 3680, page_size=4, max_running_requests=3, max_total_tokens=4)
    assert (p.max_total_num_tokens, p.capped) == (4, True)


def test_window_refusal_when_the_smallest_plan_fits_exactly() -> None:
    """A budget exactly equal to the smallest plan's bytes names the window, not the memory."""
    # window 48: smallest plan swa 50, full 100: 856 + 1800 + 1500 = 4156 B
    with pytest.raises(PlanError) as info:
        plan(HybridSWAPoolConfigurator, HYBRID, 4156, window=48, max_running_requests=1, max_total_tokens=60)
    assert not isinstance(info.value, InsufficientMemoryError)


def test_the_smallest_plan_without_max_running_requests_has_one_row() -> None:
    """The error's minimum budget counts one request row when max_running_requests is unset."""
    with pytest.raises(InsufficientMemoryError) as info:
        plan(DefaultPoolConfigurator, DENSE, 100, page_size=4, flag="--available-memory")
    assert info.value.min_budget_bytes == 2 * 400 + 8 * 20


@pytest.mark.parametrize(
    ("budget", "frac", "hint"),
    [
        (1000, 0.88, "raise --mem-fraction-static to at least 0.88"),
        (880, 1.0, "no mem_fraction_static fits"),
        (640, 1.38, "no mem_fraction_static fits"),
    ],
)
def test_the_fraction_hint_turns_at_one(budget: int, frac: float, hint: str) -> None:
    """A fraction below 1 is offered; at 1 or above none fits (need 1760 B at fraction 0.5)."""
    with pytest.raises(InsufficientMemoryError) as info:
        plan(DefaultPoolConfigurator, DENSE, budget, page_size=4, max_running_requests=3, max_total_tokens=None)
    assert info.value.min_mem_fraction_static == frac
    assert hint in str(info.value)


def test_a_zero_window_fits_a_two_token_swa_pool() -> None:
    """A window of 0 needs only a page plus one in the SWA pool."""
    p = plan(HybridSWAPoolConfigurator, HYBRID, 4156, window=0, max_running_requests=1, max_total_tokens=4)
    assert (p.full_max_total_num_tokens, p.swa_max_total_num_tokens) == (4, 2)


def test_chunk_cap_without_limits_is_one_page() -> None:
    """Unset request and chunk limits add nothing to the SWA cap."""
    cfg = SWAChunkCapPoolConfigurator(shape(full=(0,), swa=(1, 2, 3), window=8), HYBRID, inputs(page_size=4))
    assert cfg.swa_cap() == 4
