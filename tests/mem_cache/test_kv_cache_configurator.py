"""The KV-cache configurator: budgets, configurator choice, drafts, overrides, and the built pools."""

from __future__ import annotations

import itertools

import pytest

from mem_cache.errors import InsufficientMemoryError, PlanError
from mem_cache.examples import example_names, load_example
from mem_cache.kv_cache_configurator import KVCacheConfigurator
from mem_cache.model_shape import model_shape_from_config
from mem_cache.pool_configurator import gib_at_least
from mem_cache.pools import MHATokenToKVPool, SWAKVPool
from runtime import get_context, override_server_args

SMALL = {"small-dense", "small-hybrid-5to1", "small-all-swa", "small-hybrid-mtp"}
SPEC = {
    "none": {},
    "eagle1": {"speculative_algorithm": "EAGLE"},
    "eagle4": {"speculative_algorithm": "EAGLE"},
    "standalone": {"speculative_algorithm": "STANDALONE"},
}


def _shape(name: str):
    return model_shape_from_config(load_example(name), name=name)


def _draft(name: str, spec: str):
    shape = _shape(name)
    if spec == "eagle1":
        return shape.mtp_draft_shape(1)
    if spec == "eagle4":
        return shape.mtp_draft_shape(4)
    if spec == "standalone":
        return _shape("small-dense")
    return None


def _build(shape, budget, draft=None, **fields):
    target = KVCacheConfigurator(shape, budget, draft_shape=draft, device="meta").build()
    draft_mem = None
    if draft is not None:
        draft_mem = KVCacheConfigurator(
            shape, budget, draft_shape=draft, device="meta", is_draft_worker=True, target=target
        ).build()
    return target, draft_mem


@pytest.mark.parametrize("name", sorted(example_names()))
def test_built_pools_fit_the_budget(name: str) -> None:
    """Every example x spec x page x ratio: allocated bytes equal the plan, fit the budget and use >= 99% of it."""
    budget = (64 << 20) if name in SMALL else (16 << 30)
    shape = _shape(name)
    for spec, page, ratio in itertools.product(SPEC, (1, 16), (0.25, 0.5, 0.8, 1.0)):
        fields = {
            "page_size": page,
            "swa_full_tokens_ratio": ratio,
            "context_length": 1024,
            "kv_cache_dtype": "bfloat16",
            **SPEC[spec],
        }
        with override_server_args(**fields):
            draft = _draft(name, spec)
            target, draft_mem = _build(shape, budget, draft)
        plan = target.plan
        used = target.nbytes() + (draft_mem.nbytes() if draft_mem else 0)
        where = f"{name} {spec} page={page} ratio={ratio}"
        assert used == plan.total_bytes <= budget, where
        assert used >= 0.99 * budget, where
        assert plan.full_max_total_num_tokens % page == 0 and plan.swa_max_total_num_tokens % page == 0, where
        if shape.is_hybrid_swa():
            assert plan.swa_max_total_num_tokens == int(plan.full_max_total_num_tokens * ratio) // page * page, where
        elif shape.has_swa_layers():
            assert plan.full_max_total_num_tokens == 0, where
            assert plan.swa_max_total_num_tokens == plan.max_total_num_tokens, where
            assert isinstance(target.kv_pool, SWAKVPool) and target.kv_pool.full_kv_pool.nbytes() == 0, where


def test_per_depth_draft_workers_share_one_identity_map() -> None:
    """One draft worker per MTP depth allocates exactly the plan: the first full-capacity depth owns the one identity map."""
    shape = _shape("small-hybrid-mtp")
    draft = shape.mtp_draft_shape()
    with override_server_args(context_length=1024, kv_cache_dtype="bfloat16", speculative_algorithm="EAGLE"):
        target = KVCacheConfigurator(shape, 64 << 20, draft_shape=draft, device="meta").build()
        depths = [
            KVCacheConfigurator(
                shape,
                64 << 20,
                draft_shape=draft,
                device="meta",
                is_draft_worker=True,
                target=target,
                draft_model_idx=i,
            ).build()
            for i in range(draft.num_hidden_layers)
        ]
    plan = target.plan
    assert (plan.costs.Dsf, plan.costs.Df) == (2, 1)
    assert plan.bytes_by_pool()["draft_index_maps"] == (plan.full_max_total_num_tokens + 1 + 1) * 8
    assert [d.owns_index_map for d in depths] == [True, False, False]
    assert depths[0].kv_pool.full_to_swa_index_mapping is depths[2].kv_pool.full_to_swa_index_mapping
    assert target.nbytes() + sum(d.nbytes() for d in depths) == plan.total_bytes


def test_eagle_draft_takes_exactly_its_share() -> None:
    """On a hybrid model an EAGLE draft layer lowers max tokens to the independently computed value."""
    shape = _shape("small-hybrid-5to1")
    budget, page, ratio, reqs = 32 << 20, 1, 0.5, 8
    f = s = 2 * (32 + 32) * 2  # kv_heads * (head_dim + v_head_dim) * bf16
    F, S = 2, 10

    def expected(draft_layers: int, cols: int) -> int:
        table = (reqs + 1) * cols * 4
        fixed = table + page * (f * F + s * S + f * draft_layers) + 8 * (page + 1)
        return int((budget - fixed) // (f * F + f * draft_layers + 8 + ratio * s * S))

    common = {
        "page_size": page,
        "swa_full_tokens_ratio": ratio,
        "context_length": 1024,
        "kv_cache_dtype": "bfloat16",
        "max_running_requests": reqs,
    }
    with override_server_args(**common):
        plain = KVCacheConfigurator(shape, budget, device="meta").plan()
    with override_server_args(speculative_algorithm="EAGLE", **common):
        eagle = KVCacheConfigurator(shape, budget, draft_shape=shape.mtp_draft_shape(1), device="meta").plan()
    assert plain.max_total_num_tokens == expected(0, 1024 + 4)
    assert eagle.max_total_num_tokens == expected(1, 1024 + 8)  # steps 3, topk 1: extra = max(4 + 4, 8 + 0)
    assert eagle.max_total_num_tokens < plain.max_total_num_tokens


def test_configurator_choice() -> None:
    """Dense models get the default, hybrids hybrid SWA, and no radix cache with limits gives the chunk cap."""
    with override_server_args(context_length=1024):
        assert KVCacheConfigurator(_shape("small-dense"), 8 << 20, device="meta").plan().configurator == "default"
        assert (
            KVCacheConfigurator(_shape("small-hybrid-5to1"), 8 << 20, device="meta").plan().configurator == "hybrid_swa"
        )
    with override_server_args(context_length=1024, disable_hybrid_swa_memory=True):
        assert KVCacheConfigurator(_shape("small-hybrid-5to1"), 8 << 20, device="meta").plan().configurator == "default"
    with override_server_args(
        context_length=1024, disable_radix_cache=True, max_running_requests=4, chunked_prefill_size=128, page_size=16
    ):
        plan = KVCacheConfigurator(_shape("small-hybrid-5to1"), 8 << 20, device="meta").plan()
    assert plan.configurator == "swa_chunk_cap"
    # per request: window 64 + page 16 + one decode slot = 81; 81*4 + chunk 128 + page 16 = 468, page-aligned up
    assert plan.swa_max_total_num_tokens == 480


def test_not_enough_memory_names_the_fraction() -> None:
    """A budget of measured device memory too small raises with the smallest mem_fraction_static that fits."""
    # one token of 4 float32 layers (2048 B) + its padding page + a 2-row table of 1028 columns = 12320 B
    # (cuda: only a measured device's budget scales with the fraction; nothing is allocated by a plan)
    with override_server_args(
        device="cuda", dtype="float32", context_length=1024, mem_fraction_static=0.5, max_running_requests=1
    ):
        with pytest.raises(InsufficientMemoryError) as info:
            KVCacheConfigurator(_shape("small-dense"), 12000, device="meta").plan()
        assert KVCacheConfigurator(_shape("small-dense"), 12320, device="meta").plan().max_total_num_tokens == 1
    assert info.value.min_mem_fraction_static == 0.52
    assert info.value.lines() == [
        "$.schedule.mem_fraction_static: the KV cache needs at least 12320 bytes, the budget is 12000 bytes "
        "(mem_fraction_static 0.5) -- raise --mem-fraction-static to at least 0.52"
    ]


def test_not_enough_memory_names_the_explicit_budget() -> None:
    """An explicit budget too small raises with the smallest budget, in bytes and GiB, for the flag that set it."""
    with override_server_args(context_length=1024, max_running_requests=1):
        with pytest.raises(InsufficientMemoryError) as info:
            KVCacheConfigurator(_shape("small-dense"), 12000, device="meta", budget_flag="--available-memory").plan()
    assert (info.value.min_budget_bytes, info.value.min_mem_fraction_static) == (12320, None)
    assert info.value.lines() == [
        "$.available_memory: the KV cache needs at least 12320 bytes, the budget is 12000 bytes "
        "(from --available-memory) -- raise --available-memory to at least 12320 bytes (0.01GiB)"
    ]


@pytest.mark.parametrize(("n", "text"), [(1, "0.01"), (1 << 30, "1.00"), ((1 << 30) + 1, "1.01"), (260003088, "0.25")])
def test_gib_at_least_rounds_up(n: int, text: str) -> None:
    """The GiB figure is rounded up, so the printed size always holds the bytes asked for."""
    assert gib_at_least(n) == text


def test_small_swa_pool_names_the_ratio() -> None:
    """An SWA pool that cannot hold a window plus a page is refused naming swa_full_tokens_ratio."""
    with override_server_args(context_length=1024, swa_full_tokens_ratio=0.05, max_total_tokens=1000):
        with pytest.raises(
            PlanError,
            match=r"cannot hold one sliding window \(64\) plus a page \(1\) -- raise swa_full_tokens_ratio \(now 0.05\)",
        ):
            KVCacheConfigurator(_shape("small-hybrid-5to1"), 64 << 20, device="meta").plan()


def test_draft_pools_by_metadata() -> None:
    """Banded MTP depths get identity SWA pools of full size; full depths and EAGLE3 drafts plain pools of full size."""
    shape = _shape("small-hybrid-mtp")
    with override_server_args(context_length=1024, speculative_algorithm="EAGLE"):
        target = KVCacheConfigurator(shape, 16 << 20, device="meta").build()
        full = target.plan.full_max_total_num_tokens
        band = KVCacheConfigurator(
            shape, 16 << 20, device="meta", is_draft_worker=True, draft_model_idx=2, target=target
        ).build()
        dense = KVCacheConfigurator(
            shape, 16 << 20, device="meta", is_draft_worker=True, draft_model_idx=1, target=target
        ).build()
    assert isinstance(band.kv_pool, SWAKVPool) and band.kv_pool.identity_map and band.kv_pool.size_swa == full
    assert isinstance(dense.kv_pool, MHATokenToKVPool) and dense.kv_pool.size == full
    assert band.allocator is target.allocator and band.req_to_token_pool is target.req_to_token_pool
    eagle3_draft = model_shape_from_config(load_example("small-dense"))
    with override_server_args(context_length=1024, speculative_algorithm="EAGLE3"):
        t3 = KVCacheConfigurator(_shape("small-hybrid-5to1"), 16 << 20, draft_shape=eagle3_draft, device="meta").build()
        d3 = KVCacheConfigurator(
            _shape("small-hybrid-5to1"),
            16 << 20,
            draft_shape=eagle3_draft,
            device="meta",
            is_draft_worker=True,
            target=t3,
        ).build()
    assert isinstance(d3.kv_pool, MHATokenToKVPool) and d3.kv_pool.size == t3.plan.full_max_total_num_tokens


def test_replan_follows_overrides() -> None:
    """After speculative and mamba overrides a new plan reflects them; rows and buffers share one draft bound."""
    shape = _shape("small-dense")
    with override_server_args(
        context_length=1024,
        speculative_algorithm="EAGLE",
        speculative_num_steps=3,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=4,
    ):
        before = KVCacheConfigurator(shape, 8 << 20, device="meta").build()
        get_context().override("test", speculative_num_steps=7, speculative_num_draft_tokens=8)
        get_context().override("mamba_pool.memory_budget", max_mamba_cache_size=12)
        after = KVCacheConfigurator(shape, 8 << 20, device="meta").build()
    assert (before.plan.max_draft_tokens, before.plan.extra_context_len, before.max_mamba_cache_size) == (4, 8, None)
    assert (after.plan.max_draft_tokens, after.plan.alloc_len_per_decode, after.plan.extra_context_len) == (8, 8, 16)
    assert after.req_to_token_pool.max_context_len == 1024 + 16 and after.max_mamba_cache_size == 12


def test_decode_disaggregation_adds_rows() -> None:
    """A decode server's request table gets the extra slots."""
    with override_server_args(
        context_length=1024, max_running_requests=5, disaggregation_mode="decode", disaggregation_decode_extra_slots=3
    ):
        mem = KVCacheConfigurator(_shape("small-dense"), 8 << 20, device="meta").build()
    assert mem.req_to_token_pool.req_to_token.shape == (5 + 3 + 1, 1028)


def test_chunk_cap_budgets_the_draft() -> None:
    """The SWA chunk-cap plan keeps its SWA cap and gives the full pool what is left after the draft layer."""
    shape = _shape("small-hybrid-5to1")
    budget, page, reqs, chunk, window = 8 << 20, 16, 4, 128, 64
    f = s = 2 * (32 + 32) * 2
    F, S = 2, 10

    def expected(draft_layers: int, dt: int, alloc_len: int, extra: int) -> tuple[int, int]:
        cap = -(-((window + dt + page + alloc_len) * reqs + chunk + page) // page) * page
        fixed = (reqs + 1) * (1024 + extra) * 4 + page * (f * F + s * S + f * draft_layers) + 8 * (page + 1)
        per_full = f * F + f * draft_layers + 8
        return (budget - fixed - s * S * cap) // per_full // page * page, cap

    common = {
        "page_size": page,
        "context_length": 1024,
        "kv_cache_dtype": "bfloat16",
        "max_running_requests": reqs,
        "chunked_prefill_size": chunk,
        "disable_radix_cache": True,
    }
    with override_server_args(**common):
        plain = KVCacheConfigurator(shape, budget, draft_shape=shape.mtp_draft_shape(1), device="meta").plan()
    with override_server_args(speculative_algorithm="EAGLE", **common):
        eagle = KVCacheConfigurator(shape, budget, draft_shape=shape.mtp_draft_shape(1), device="meta").plan()
    assert plain.configurator == eagle.configurator == "swa_chunk_cap"
    assert plain.costs.Df == 0 and plain.costs.draft_per_token == 0  # no speculative decoding: no draft terms
    assert (plain.full_max_total_num_tokens, plain.swa_max_total_num_tokens) == expected(0, 0, 1, 4)
    # steps 3, topk 1, Dt 4: alloc_len max(3, 4) = 4, extra max(4 + 4, 2*4 + 15) = 23
    assert (eagle.full_max_total_num_tokens, eagle.swa_max_total_num_tokens) == expected(1, 4, 4, 23)


@pytest.mark.parametrize(
    ("name", "full", "swa", "configurator"),
    [
        ("small-dense", 992, 0, "default"),
        ("small-hybrid-5to1", 992, 496, "hybrid_swa"),
        ("small-all-swa", 0, 992, "hybrid_swa"),
    ],
)
def test_max_total_tokens_caps_the_pools(name: str, full: int, swa: int, configurator: str) -> None:
    """A max_total_tokens below what fits sizes the pools from the cap, page-aligned, and marks the plan capped."""
    with override_server_args(context_length=1024, page_size=16, swa_full_tokens_ratio=0.5, max_total_tokens=1000):
        plan = KVCacheConfigurator(_shape(name), 64 << 20, device="meta").plan()
    assert (plan.configurator, plan.full_max_total_num_tokens, plan.swa_max_total_num_tokens) == (
        configurator,
        full,
        swa,
    )
    assert plan.capped and plan.max_total_num_tokens == 992 and plan.total_bytes < 64 << 20


def test_cuda_budget_is_measured_free_memory_times_the_fraction(monkeypatch: pytest.MonkeyPatch) -> None:
    """On cuda the budget is free device memory times mem_fraction_static, and the plan says so; a set budget wins."""
    import torch

    from mem_cache.kv_cache_configurator import kv_budget

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (10_000_000, 80_000_000))
    with override_server_args(
        device="cuda", mem_fraction_static=0.5, context_length=1024, max_running_requests=1
    ) as ctx:
        budget = kv_budget(ctx.snapshot())
        assert (budget.bytes, budget.flag) == (5_000_000, None)
        assert budget.source == "free cuda:0 memory 10,000,000 bytes times mem_fraction_static 0.5"
        plan = KVCacheConfigurator(_shape("small-dense")).plan()  # cuda:0 is named, never touched by a plan
        assert (plan.budget_bytes, plan.budget_source) == (5_000_000, budget.source)
    with override_server_args(device="cuda", kv_cache_memory_bytes=3_000_000, context_length=1024) as ctx:
        assert kv_budget(ctx.snapshot()).bytes == 3_000_000


def test_cuda_budget_without_cuda_asks_for_a_byte_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planning for cuda where none is visible asks for --kv-cache-memory-bytes instead of guessing a size."""
    import torch

    from mem_cache.kv_cache_configurator import kv_budget

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with override_server_args(device="cuda") as ctx, pytest.raises(PlanError) as info:
        kv_budget(ctx.snapshot())
    assert info.value.lines() == [
        "$.schedule.kv_cache_memory_bytes: the KV budget is cuda:0 memory times mem_fraction_static, and no cuda:0 "
        "memory can be measured on this machine -- set --kv-cache-memory-bytes (e.g. 25769803776 for 24GiB)"
    ]
