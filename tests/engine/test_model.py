"""The embedded model: config reading, tokenizer, determinism and the dense reference."""

from __future__ import annotations

import pytest
import torch

from engine.model import (
    FULL,
    SLIDING,
    ByteTokenizer,
    DenseAttention,
    ModelShape,
    TinyTransformer,
    dense_attention,
    reference_generate,
)
from sgconf.errors import ConfigError
from sgconf.models import builtin_model_config


@pytest.fixture(scope="module")
def shape() -> ModelShape:
    return ModelShape.from_config(builtin_model_config("tiny"))


def test_tiny_shape_is_hybrid_swa(shape: ModelShape) -> None:
    """The embedded model alternates sliding and full layers with a 32-token window."""
    assert shape.layer_types == (SLIDING, FULL, SLIDING, FULL)
    assert shape.swa_layer_ids == (0, 2)
    assert shape.full_layer_ids == (1, 3)
    assert shape.window_of(0) == 32
    assert shape.window_of(1) is None
    assert (shape.num_heads, shape.num_kv_heads, shape.head_dim, shape.vocab_size) == (4, 2, 16, 256)
    assert shape.eos_token_id == 0


def test_swa_layer_ids_form_is_read() -> None:
    """`swa_attention_layer_ids` marks sliding layers when `layer_types` is absent."""
    cfg = dict(builtin_model_config("tiny"))
    del cfg["layer_types"]
    cfg["swa_attention_layer_ids"] = [1]
    assert ModelShape.from_config(cfg).layer_types == (FULL, SLIDING, FULL, FULL)


def test_bad_config_lists_every_problem() -> None:
    """Missing sizes are reported together, each with its `$.model_config` path."""
    with pytest.raises(ConfigError) as info:
        ModelShape.from_config({"num_hidden_layers": 0, "vocab_size": 256, "hidden_size": 8})
    assert info.value.lines() == [
        "$.model_config.num_hidden_layers: must be a positive integer, got 0",
        "$.model_config.num_attention_heads: must be a positive integer, got None",
        "$.model_config.intermediate_size: must be a positive integer, got None",
    ]


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
