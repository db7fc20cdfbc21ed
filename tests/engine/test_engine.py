"""The embedded engine: paged generation equals the dense reference, with and without caches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from engine.errors import InvalidRequest, RequestRejected
from engine.model import reference_generate
from sgconf.serving.models import builtin_model_config

PROMPT = "Hello, world! The quick brown fox jumps over the lazy dog."


@pytest.mark.parametrize("page_size", ["1", "4"])
def test_paged_output_equals_dense_reference(make_engine, page_size: str) -> None:
    """Greedy tokens from chunked paged prefill and decode equal a dense no-cache forward."""
    engine = make_engine("--page-size", page_size, "--chunked-prefill-size", "8")
    ref = reference_generate(engine.model, engine.tokenizer.encode(PROMPT), 24)
    result = engine.generate(PROMPT, max_new_tokens=24, ignore_eos=False)
    assert result.token_ids == tuple(ref)
    assert result.text == engine.tokenizer.decode(ref)
    # 57 prompt tokens need KV before decoding: chunks of at most 8 give 8 prefill batches
    assert engine.stats()["counters"]["prefill_batches"] == 8
    assert result.stats.prompt_tokens == 58 and result.stats.completion_tokens == 24


def test_prefix_cache_reuse_keeps_output(make_engine) -> None:
    """A repeated prompt reuses its cached pages and produces the same tokens, greedy and sampled."""
    cached = make_engine("--page-size", "4")
    first = cached.generate(PROMPT, max_new_tokens=16)
    second = cached.generate(PROMPT, max_new_tokens=16)
    sampled = cached.generate(PROMPT, max_new_tokens=16, temperature=0.9, seed=7)
    assert first.stats.cached_tokens == 0
    assert second.stats.cached_tokens == 56  # 57 tokens need KV; whole pages of 4 are reused
    assert second.token_ids == first.token_ids
    cached.shutdown()
    plain = make_engine("--disable-radix-cache")
    assert plain.prefix_cache is None
    assert plain.generate(PROMPT, max_new_tokens=16).token_ids == first.token_ids
    assert plain.generate(PROMPT, max_new_tokens=16, temperature=0.9, seed=7).token_ids == sampled.token_ids


def test_concurrent_requests_are_batched(make_engine) -> None:
    """Concurrent callers share decode batches and each gets its own reference output."""
    engine = make_engine("--chunked-prefill-size", "256")
    prompts = [PROMPT[: 10 + 3 * i] for i in range(6)]
    engine.pause()  # all six are queued before the first step, so they are admitted together
    reqs = [engine.submit(p, max_new_tokens=12) for p in prompts]
    assert engine.busy_counts() == (6, 0)
    engine.resume()
    results = [engine.wait(r, timeout=120) for r in reqs]
    for p, r in zip(prompts, results, strict=True):
        assert r.token_ids == tuple(reference_generate(engine.model, engine.tokenizer.encode(p), 12))
    counters = engine.stats()["counters"]
    assert counters["decode_tokens"] == 72
    assert counters["decode_batches"] == 12  # all six decode together, one batch per token


def test_memory_pressure_retracts_and_keeps_output(make_engine) -> None:
    """With a tiny KV pool and admission that keeps nothing back, requests are retracted and recomputed, outputs exact."""
    engine = make_engine(
        "--max-total-tokens",
        "160",
        "--disable-radix-cache",
        "--chunked-prefill-size",
        "64",
        "--schedule-conservativeness",
        "0",
    )
    prompts = [PROMPT[:40] + str(i) for i in range(4)]
    # the loop is paused and this test steps it: all four requests are admitted together, every
    # run, so the pool of 160 tokens is short by the same amount on every machine
    engine.pause()
    reqs = [engine.submit(p, max_new_tokens=30, ignore_eos=True) for p in prompts]
    steps = 0
    while engine.busy_counts() != (0, 0):
        engine.step()
        steps += 1
        assert steps < 10_000, "the scheduler made no progress"
    results = [engine.wait(r, timeout=0) for r in reqs]
    for p, r in zip(prompts, results, strict=True):
        assert len(r.token_ids) == 30
        dense = reference_generate(engine.model, engine.tokenizer.encode(p), 30)
        assert r.token_ids[: len(dense)] == tuple(dense)
    assert engine.stats()["counters"]["retractions"] >= 1


def test_bad_requests_are_rejected(make_engine) -> None:
    """Empty prompts, out-of-vocab ids and over-long requests fail before queueing."""
    engine = make_engine()
    with pytest.raises(InvalidRequest, match="0 token ids: the prompt is empty"):
        engine.generate([], max_new_tokens=1)
    with pytest.raises(RequestRejected, match=r"\$.prompt_or_ids: token id 300 is outside the vocabulary 0..255"):
        engine.generate([1, 300], max_new_tokens=1)
    with pytest.raises(RequestRejected, match="exceeds the context length 2048"):
        engine.generate([1] * 2000, max_new_tokens=100)
    assert engine.busy_counts() == (0, 0)


@pytest.mark.parametrize("algorithm", ["EAGLE", "STANDALONE"])
def test_speculative_greedy_equals_target_only(make_engine, algorithm: str) -> None:
    """Draft-and-verify decoding emits exactly the target's greedy tokens and reports the accept length."""
    engine = make_engine("--speculative-algorithm", algorithm, "--speculative-num-steps", "3", "--page-size", "2")
    ref = reference_generate(engine.model, engine.tokenizer.encode(PROMPT), 30)
    result = engine.generate(PROMPT, max_new_tokens=30)
    assert result.token_ids == tuple(ref)
    assert result.stats.spec_verify_steps >= 8
    assert 1.0 <= result.stats.spec_accept_length <= 4.0
    assert engine.stats()["speculative"]["algorithm"] == algorithm


def test_identical_draft_accepts_everything(make_engine, tmp_path: Path) -> None:
    """A draft with the target's config and seed is the target: every step emits steps + 1 tokens."""
    cfg = tmp_path / "draft.json"
    cfg.write_text(json.dumps(builtin_model_config("tiny")))
    engine = make_engine(
        "--speculative-algorithm",
        "STANDALONE",
        "--speculative-num-steps",
        "3",
        "--speculative-draft-model-config",
        str(cfg),
    )
    result = engine.generate(PROMPT, max_new_tokens=40, ignore_eos=True)
    assert result.stats.spec_accept_length == 4.0
    assert result.stats.spec_verify_steps == 10
    sampled = engine.generate(PROMPT, max_new_tokens=20, temperature=0.8, seed=3, ignore_eos=True)
    engine.shutdown()
    plain = make_engine()
    assert (
        plain.generate(PROMPT, max_new_tokens=20, temperature=0.8, seed=3, ignore_eos=True).token_ids
        == sampled.token_ids
    )


def test_topk_above_one_drafts_a_single_chain(make_engine) -> None:
    """A tree topk is announced as drafted single-chain, and greedy output still equals the target's."""
    from structlog.testing import capture_logs

    with capture_logs() as logs:
        engine = make_engine(
            "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "2", "--speculative-eagle-topk", "2"
        )
    assert {
        "event": "speculative.single_chain",
        "speculative_eagle_topk": 2,
        "drafted_topk": 1,
        "log_level": "warning",
    } in logs
    ref = reference_generate(engine.model, engine.tokenizer.encode(PROMPT), 12)
    assert engine.generate(PROMPT, max_new_tokens=12).token_ids == tuple(ref)


def test_prefetch_timeout_comes_from_the_memory_bag(make_engine) -> None:
    """The 'timeout' prefetch policy waits as long as --hicache-storage-prefetch-timeout-s says."""
    engine = make_engine(
        "--enable-hierarchical-cache",
        "--hicache-storage-prefetch-policy",
        "timeout",
        "--hicache-storage-prefetch-timeout-s",
        "0.25",
    )
    assert engine.hicache is not None
    assert engine.hicache.controller.prefetch_policy == "timeout"
    assert engine.hicache.controller.prefetch_timeout_s == 0.25


def test_unsupported_host_layout_is_reported(make_engine) -> None:
    """A host layout or copy engine the tier does not implement is logged, not silently ignored."""
    from structlog.testing import capture_logs

    with capture_logs() as logs:
        make_engine("--enable-hierarchical-cache", "--hicache-mem-layout", "page_first")
    warned = [e for e in logs if e["event"] == "hicache.setting_not_supported"]
    assert warned == [
        {
            "event": "hicache.setting_not_supported",
            "log_level": "warning",
            "field": "hicache_mem_layout",
            "value": "page_first",
            "using": "layer_first",
        }
    ]


def test_an_attach_the_controller_cannot_finish_rolls_the_config_back(make_engine, tmp_path: Path, monkeypatch) -> None:
    """The controller failing after the config swap leaves config and controller agreeing: no backend."""
    from engine.storage_change import attach_values
    from runtime import get_context, get_memory

    engine = make_engine("--enable-hierarchical-cache")
    bridge = engine.hicache
    assert bridge is not None

    def broken(prepared: object) -> None:
        raise OSError("the host tier refused the backend")

    monkeypatch.setattr(bridge.controller, "commit_attach", broken)
    generation = get_context().generation
    with pytest.raises(OSError, match="host tier refused"):
        bridge.attach(attach_values("file", extra_config={"dir": str(tmp_path / "kv")}))
    assert get_memory().hicache_storage_backend is None
    assert bridge.controller.storage_backend is None
    assert get_context().generation == generation + 2  # the attach and its rollback
    assert [r.source for r in get_context().overrides_log()][-2:] == ["hicache.attach", "rollback:hicache.attach"]
    monkeypatch.undo()
    bridge.attach(attach_values("file", extra_config={"dir": str(tmp_path / "kv")}))
    assert get_memory().hicache_storage_backend == "file" and bridge.controller.storage_backend is not None


def test_speculative_greedy_with_penalties_equals_the_dense_oracle(make_engine) -> None:
    """With penalties and top_k=1, draft-and-verify emits exactly the penalised greedy tokens of a dense forward."""
    from engine.model import DenseAttention
    from engine.sampling import SamplingParams, penalised

    engine = make_engine("--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3")
    params = SamplingParams(temperature=0.7, top_k=1, repetition_penalty=1.5, frequency_penalty=0.5)
    prompt = engine.tokenizer.encode(PROMPT)
    ids, out = list(prompt), []
    attn = DenseAttention(engine.model.shape)
    for _ in range(20):
        logits = engine.model(torch.tensor(ids, dtype=torch.long), torch.arange(len(ids)), attn)[-1]
        out.append(int(penalised(logits, params, prompt, out).argmax()))
        ids.append(out[-1])
    result = engine.generate(
        PROMPT,
        max_new_tokens=20,
        ignore_eos=True,
        temperature=0.7,
        top_k=1,
        repetition_penalty=1.5,
        frequency_penalty=0.5,
    )
    assert list(result.token_ids) == out
    assert result.stats.spec_verify_steps >= 1


def test_flush_cache_is_refused_while_requests_wait(make_engine) -> None:
    """A flush with a request queued raises EngineBusy and keeps the cache; once idle it frees the pages."""
    from engine.errors import EngineBusy

    engine = make_engine()
    engine.generate(PROMPT, max_new_tokens=2)
    cached = engine.prefix_cache.stats().cached_tokens
    engine.pause()
    req = engine.submit(PROMPT, max_new_tokens=2)
    with pytest.raises(EngineBusy, match="cannot flush the cache while requests run"):
        engine.flush_cache()
    assert engine.prefix_cache.stats().cached_tokens == cached
    engine.resume()
    engine.wait(req, timeout=60)
    assert engine.flush_cache() > 0 and engine.prefix_cache.stats().cached_tokens == 0
