"""The embedded model: config reading, tokenizer, determinism and the dense reference."""

from __future__ import annotations

import pytest
import torch

from engine.model import (
    ByteTokenizer,
    DenseAttention,
    TinyTransformer,
    dense_attention,
    reference_generate,
    runnable_shape,
)
from mem_cache.model_shape import FULL, SLIDING, ModelShape, model_shape_from_config
from sgconf.errors import ConfigError
from sgconf.serving.models import builtin_model_config


@pytest.fixture(scope="module")
def shape() -> ModelShape:
    return runnable_shape(builtin_model_config("tiny"))


def test_tiny_shape_is_hybrid_swa(shape: ModelShape) -> None:
    """The embedded model alternates sliding and full layers with a 32-token window."""
    assert shape.layer_types == (SLIDING, FULL, SLIDING, FULL)
    assert shape.swa_attention_layer_ids == (0, 2)
    assert shape.full_attention_layer_ids == (1, 3)
    assert shape.window_of(0) == 32
    assert shape.window_of(1) is None
    assert (shape.num_attention_heads, shape.num_key_value_heads, shape.head_dim, shape.vocab_size) == (4, 2, 16, 256)
    assert shape.eos_token_id == 0


def test_swa_layer_ids_form_is_read() -> None:
    """`swa_attention_layer_ids` marks sliding layers when `layer_types` is absent."""
    cfg = dict(builtin_model_config("tiny"))
    del cfg["layer_types"]
    cfg["swa_attention_layer_ids"] = [1]
    assert runnable_shape(cfg).layer_types == (FULL, SLIDING, FULL, FULL)


def test_bad_config_lists_every_problem() -> None:
    """Bad sizes are reported together, each with its `$.<key>` path; the planner's checks come first."""
    with pytest.raises(ConfigError) as info:
        runnable_shape({"num_hidden_layers": 0, "vocab_size": 256, "hidden_size": 8})
    assert info.value.lines() == [
        "$.num_hidden_layers: must be an integer >= 1 (got 0)",
        "$.num_attention_heads: is required",
    ]
    with pytest.raises(ConfigError) as info:
        runnable_shape({"num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 8})
    assert info.value.lines() == [
        "$.intermediate_size: is required to run the model",
        "$.vocab_size: is required to run the model",
    ]


def test_plan_and_model_agree_on_a_sliding_window_pattern_only_config() -> None:
    """A config with `sliding_window_pattern` and no `layer_types`: the model slides exactly where the plan does."""
    from engine.memory import build_memory
    from runtime import override_server_args
    from runtime.context import get_context

    cfg = dict(builtin_model_config("tiny"))
    del cfg["layer_types"]
    cfg.update(num_hidden_layers=6, sliding_window_pattern=3)  # layers 2 and 5 are full (5:1 in gemma-3 style)
    shape = runnable_shape(cfg)
    assert shape.layer_types == (SLIDING, SLIDING, FULL, SLIDING, SLIDING, FULL)
    assert [shape.window_of(i) for i in range(6)] == [32, 32, None, 32, 32, None]
    assert model_shape_from_config(cfg) == shape  # the planner's parse is the same object
    with override_server_args(max_total_tokens=512, page_size=4):
        memory = build_memory(get_context().snapshot(), shape)
    pool = memory.kv_pool
    assert type(pool).__name__ == "SWAKVPool"
    assert (pool.swa_attention_layer_ids, pool.full_attention_layer_ids) == ((0, 1, 3, 4), (2, 5))


def test_byte_tokenizer_round_trips_unicode() -> None:
    """Text round-trips through UTF-8 byte tokens."""
    tok = ByteTokenizer()
    assert tok.encode("hé") == [104, 195, 169]
    assert tok.decode(tok.encode("héllo ✓")) == "héllo ✓"
    assert tok.decode([195]) == "\ufffd"


def test_same_seed_same_weights(shape: ModelShape) -> None:
    """Weights are a function of the seed alone."""
    a, b, c = TinyTransformer(shape, seed=3), TinyTransformer(shape, seed=3), TinyTransformer(shape, seed=4)
    assert torch.equal(a.layers[2].q_proj.weight, b.layers[2].q_proj.weight)
    assert not torch.equal(a.layers[2].q_proj.weight, c.layers[2].q_proj.weight)


def test_dense_attention_window_mask() -> None:
    """With a window of 2, a query sees only itself and the previous key."""
    q = torch.zeros(4, 1, 2)
    k = torch.zeros(4, 1, 2)
    v = torch.arange(4, dtype=torch.float32).view(4, 1, 1).expand(4, 1, 2).contiguous()
    out = dense_attention(q, k, v, window=2)
    assert out[:, 0].tolist() == [0.0, 0.5, 1.5, 2.5]
    out = dense_attention(q, k, v, window=None)
    assert out[:, 0].tolist() == [0.0, 0.5, 1.0, 1.5]


def test_incremental_dense_matches_full(shape: ModelShape) -> None:
    """Attending the last query with an offset equals the last row of the full computation."""
    torch.manual_seed(0)
    q, k, v = torch.randn(40, 4, 16), torch.randn(40, 2, 16), torch.randn(40, 2, 16)
    full = dense_attention(q, k, v, window=32)
    last = dense_attention(q[-1:], k, v, window=32, q_offset=39)
    torch.testing.assert_close(last, full[-1:])


def test_reference_generate_is_deterministic(shape: ModelShape) -> None:
    """Greedy reference decoding gives the same tokens twice and does not collapse to one token."""
    model = TinyTransformer(shape, seed=0)
    prompt = ByteTokenizer().encode("Hello, world! ")
    first = reference_generate(model, prompt, 12)
    assert first == reference_generate(model, prompt, 12)
    assert len(first) == 12 and len(set(first)) > 1
    logits = model(torch.tensor(prompt), torch.arange(len(prompt)), DenseAttention(shape))
    assert logits.shape == (len(prompt), 256)
