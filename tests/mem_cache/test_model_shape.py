"""Model shapes from HF-style configs: layer kinds, geometry, drafts and key-naming errors."""

from __future__ import annotations

import pytest

from mem_cache.errors import ModelShapeError
from mem_cache.examples import example_names, load_example
from mem_cache.model_shape import (
    DTYPE_BYTES,
    FULL,
    draft_swa_full_capacity,
    is_hybrid_swa_mtp_draft,
    model_shape_from_config,
)

BASE = {"num_hidden_layers": 6, "num_attention_heads": 4, "hidden_size": 64}


def test_every_example_parses() -> None:
    """Each shipped example builds a shape whose layer ids split its layers exactly."""
    for name in example_names():
        shape = model_shape_from_config(load_example(name), name=name)
        ids = sorted(shape.swa_attention_layer_ids + shape.full_attention_layer_ids)
        assert ids == list(range(shape.num_hidden_layers)), name


def test_published_layouts() -> None:
    """gemma-3 is 5:1 (every sixth layer full), gpt-oss alternates from sliding, mistral is all-SWA."""
    g3 = model_shape_from_config(load_example("gemma-3-27b"))
    assert g3.full_attention_layer_ids == (5, 11, 17, 23, 29, 35, 41, 47, 53, 59)
    assert g3.is_hybrid_swa() and not g3.is_hybrid_swa(disable_hybrid_swa_memory=True)
    oss = model_shape_from_config(load_example("gpt-oss-20b"))
    assert oss.swa_attention_layer_ids[:3] == (0, 2, 4) and oss.full_attention_layer_ids[:2] == (1, 3)
    mistral = model_shape_from_config(load_example("mistral-7b-v0.1"))
    assert mistral.full_attention_layer_ids == () and not mistral.is_hybrid_swa() and mistral.has_swa_layers()


def test_layer_sources_and_defaults() -> None:
    """head_dim comes from hidden_size / heads; ids, a pattern and use_sliding_window=false each decide kinds."""
    s = model_shape_from_config({**BASE, "sliding_window": 8, "swa_attention_layer_ids": [0, 1]})
    assert (s.head_dim, s.num_key_value_heads, s.full_attention_layer_ids) == (16, 4, (2, 3, 4, 5))
    p = model_shape_from_config({**BASE, "sliding_window_size": 8, "sliding_window_pattern": 3})
    assert p.full_attention_layer_ids == (2, 5) and p.sliding_window == 8
    off = model_shape_from_config({**BASE, "sliding_window": 8, "use_sliding_window": False})
    assert off.swa_attention_layer_ids == ()
    assert s.local_layer_ids(1, 4) == ((1,), (2, 3))


def test_errors_name_every_bad_key() -> None:
    """All problems are reported together, each with its key."""
    with pytest.raises(ModelShapeError) as info:
        model_shape_from_config({"num_attention_heads": 0, "layer_types": ["x"], "torch_dtype": "int3"})
    assert info.value.lines() == [
        "$.num_hidden_layers: is required",
        "$.num_attention_heads: must be an integer >= 1 (got 0)",
        "$.torch_dtype: unknown dtype 'int3' -- use one of " + str(sorted(DTYPE_BYTES)),
    ]


def test_sliding_layers_need_a_window() -> None:
    """Sliding layers without sliding_window are refused, naming the key."""
    with pytest.raises(ModelShapeError, match=r"\$\.sliding_window: is required"):
        model_shape_from_config({**BASE, "swa_attention_layer_ids": [0]})


def test_mtp_draft_routing_is_by_metadata() -> None:
    """Depths in mtp_local_layer_ids slide at full capacity, only for a draft worker with a depth on a hybrid model."""
    shape = model_shape_from_config(load_example("small-hybrid-mtp"))
    draft = shape.mtp_draft_shape()
    assert (draft.num_hidden_layers, draft.swa_attention_layer_ids, draft.full_attention_layer_ids) == (3, (0, 2), (1,))
    assert is_hybrid_swa_mtp_draft(shape, is_draft_worker=True, draft_model_idx=1)
    assert not is_hybrid_swa_mtp_draft(shape, is_draft_worker=True, draft_model_idx=None)
    assert not is_hybrid_swa_mtp_draft(shape, is_draft_worker=False, draft_model_idx=0)
    assert draft_swa_full_capacity(shape, draft, is_draft_worker=True, draft_model_idx=2)
    assert not draft_swa_full_capacity(shape, draft, is_draft_worker=True, draft_model_idx=1)
    plain = model_shape_from_config(load_example("small-hybrid-5to1"))
    assert not is_hybrid_swa_mtp_draft(plain, is_draft_worker=True, draft_model_idx=0)


def test_malformed_values_are_problems_not_crashes() -> None:
    """Lists where strings belong are reported against their key, never raised as a TypeError."""
    with pytest.raises(ModelShapeError) as info:
        model_shape_from_config(
            {**BASE, "layer_types": [["x"], "full_attention", 3, 3, FULL, FULL], "torch_dtype": ["bf16"]}
        )
    assert info.value.lines() == [
        "$.torch_dtype: unknown dtype ['bf16'] -- use one of " + str(sorted(DTYPE_BYTES)),
        "$.layer_types: unknown layer types 3, ['x'] -- use 'sliding_attention' or 'full_attention'",
    ]
