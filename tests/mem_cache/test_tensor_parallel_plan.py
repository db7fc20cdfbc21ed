"""Planning under tensor parallelism: each rank holds its share of the KV heads, replicated below one head a rank."""

from __future__ import annotations

import json

import pytest

from mem_cache.errors import PlanError
from mem_cache.plan_cli import main as plan_main

GIB = 1 << 30
CONTEXT = 131072  # max_position_embeddings of both models below
ROW_BYTES = (CONTEXT + 4) * 4  # one req-to-token row: context + 4 spare columns of int32


def plan(capsys: pytest.CaptureFixture[str], model: str, *flags: str) -> dict:
    assert (
        plan_main(
            [
                "--model-config",
                model,
                "--available-memory",
                "1GiB",
                "--max-running-requests",
                "8",
                *flags,
                "--format",
                "json",
            ]
        )
        == 0
    )
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    ("tp", "heads_per_rank", "replicated"),
    [
        ("1", 8, False),
        ("2", 4, False),  # 8 KV heads split 4 + 4
        ("8", 1, False),
        ("16", 1, True),  # fewer KV heads than ranks: one head per rank, each head on two ranks
    ],
)
def test_llama_bytes_tokens_and_pools_are_per_rank(
    capsys: pytest.CaptureFixture[str], tp: str, heads_per_rank: int, replicated: bool
) -> None:
    """llama-3.1-8b (32 layers, 8 KV heads of 128, bf16): bytes per token and pool sizes follow the heads a rank holds."""
    out = plan(capsys, "llama-3.1-8b", "--tp-size", tp)
    per_token = heads_per_rank * (128 + 128) * 2 * 32
    assert out["bytes_per_token"]["full"] == per_token
    assert out["tensor_parallel"] == {
        "tp_size": int(tp),
        "kv_heads_total": 8,
        "kv_heads_per_rank": heads_per_rank,
        "replicated": replicated,
        "sizes_are": "per rank",
    }
    req_bytes = 9 * ROW_BYTES  # 8 requests and the dummy row 0
    tokens = (GIB - req_bytes) // per_token - 1  # page size 1: one padding slot
    assert out["pool_bytes"] == {"req_to_token": req_bytes, "kv_full": (tokens + 1) * per_token}
    assert out["max_total_num_tokens"] == tokens
    assert out["total_bytes"] <= GIB


def test_tp_2_halves_a_ranks_bytes_per_token(capsys: pytest.CaptureFixture[str]) -> None:
    """`--tp-size 2` halves the bytes per token of one rank, so one rank's budget holds about twice the tokens."""
    one, two = plan(capsys, "llama-3.1-8b"), plan(capsys, "llama-3.1-8b", "--tp-size", "2")
    assert two["bytes_per_token"]["full"] * 2 == one["bytes_per_token"]["full"] == 131072
    assert 2 * one["max_total_num_tokens"] <= two["max_total_num_tokens"] <= 2 * one["max_total_num_tokens"] + 2


def test_hybrid_swa_gqa_model_with_fewer_kv_heads_than_ranks(capsys: pytest.CaptureFixture[str]) -> None:
    """gpt-oss-20b (24 layers alternating SWA/full, 8 KV heads of 64) at tp 16: one replicated head per rank on both pools."""
    out = plan(capsys, "gpt-oss-20b", "--tp-size", "16")
    per_layer = 1 * (64 + 64) * 2
    assert (out["bytes_per_token"]["full"], out["bytes_per_token"]["swa"]) == (per_layer * 12, per_layer * 12)
    assert out["tensor_parallel"]["kv_heads_per_rank"] == 1 and out["tensor_parallel"]["replicated"] is True


def test_heads_that_do_not_split_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """8 KV heads over 3 ranks cannot be shared evenly: exit 2 with the reason and the flag."""
    assert plan_main(["--model-config", "llama-3.1-8b", "--tp-size", "3"]) == 2
    err = capsys.readouterr().err
    assert "'num_key_value_heads' 8 does not split over tp_size 3" in err
    assert "-- use a tp_size that divides 8 or is a multiple of it (--tp-size)" in err


def test_table_names_the_split(capsys: pytest.CaptureFixture[str]) -> None:
    """The text plan says how many heads a rank holds and that sizes are per rank."""
    assert plan_main(["--model-config", "llama-3.1-8b", "--available-memory", "1GiB", "--tp-size", "2"]) == 0
    assert (
        "tensor parallel     2 ranks, 4 of 8 KV heads per rank (split); sizes below are per rank"
        in capsys.readouterr().out
    )


def test_per_rank_shape_keeps_one_head_at_least() -> None:
    """ModelShape.per_rank: split, replicate, refuse."""
    from mem_cache.model_shape import model_shape_from_config

    shape = model_shape_from_config(
        {
            "num_hidden_layers": 2,
            "num_attention_heads": 8,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "max_position_embeddings": 64,
        }
    )
    assert shape.per_rank(2).num_key_value_heads == 1
    assert shape.per_rank(4).num_key_value_heads == 1
    assert shape.per_rank(1) is shape
    with pytest.raises(PlanError, match="'num_key_value_heads' 2 does not split over tp_size 3"):
        shape.per_rank(3)


@pytest.mark.parametrize(
    ("device", "base", "expected"), [("cpu", 0, "cpu"), ("cuda", 0, "cuda:0"), ("cuda", 3, "cuda:3")]
)
def test_device_of_honours_base_gpu_id(device: str, base: int, expected: str) -> None:
    """Pools go on cuda:<base_gpu_id>; base_gpu_id means nothing on cpu."""
    import types

    from mem_cache.kv_cache_configurator import device_of

    snap = types.SimpleNamespace(device=types.SimpleNamespace(device=device, base_gpu_id=base))
    assert device_of(snap) == expected
