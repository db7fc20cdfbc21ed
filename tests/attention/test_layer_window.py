"""layer_window reads the sliding window from either model-shape flavour the project has."""

from __future__ import annotations

from attention import AttentionLayer, layer_window
from mem_cache.model_shape import model_shape_from_config
from sgconf.serving.models import builtin_model_config


def test_runtime_model_shape():
    """The engine's shape answers through window_of: tiny alternates sliding and full layers."""
    shape = model_shape_from_config(builtin_model_config("tiny"))
    assert [layer_window(shape, i) for i in range(4)] == [32, None, 32, None]


def test_memory_planning_shape():
    """The planner's shape answers through sliding_window and swa_attention_layer_ids."""
    shape = model_shape_from_config(builtin_model_config("tiny"))
    assert [layer_window(shape, i) for i in range(4)] == [32, None, 32, None]


def test_no_shape_means_full_attention():
    assert layer_window(None, 0) is None


def test_layer_spec_from_an_id():
    assert AttentionLayer.of(3) == AttentionLayer(3)
    spec = AttentionLayer(1, scaling=0.5)
    assert AttentionLayer.of(spec) is spec
