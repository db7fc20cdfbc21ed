"""The embedded model: a small deterministic transformer, its byte tokenizer and a dense reference.

The model exists so that every config consumer (pools, allocators, attention backends,
the prefix cache, HiCache) is exercised end to end by real generation. Weights are random
but reproducible: they come from one seed. Sizes come from an HF-style config dict
(`sgconf.serving.models.load_model_config`), so the same code runs the embedded hybrid-SWA
`tiny` model and any small config a test writes.

Attention is not computed here: each layer hands its projected q/k/v to an attention
callable (`LayerAttention`), which is the paged backend inside the engine and
`DenseAttention` for the reference forward. Keeping the rest of the math in one place
is what makes "paged equals dense" a meaningful test.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import torch
from torch import nn

from mem_cache.errors import ModelShapeError
from mem_cache.model_shape import ModelShape, model_shape_from_config
from sgconf.errors import FieldValueError, Problem


def runnable_shape(config: Mapping[str, Any], *, name: str | None = None) -> ModelShape:
    """The shape of a model this engine can run, parsed by the planner's own parser.

    Raises ModelShapeError (a ConfigError) listing every bad key: the parser's, plus the
    sizes a plan does not need but a forward pass does.
    """
    return runnable(model_shape_from_config(config, name=name), name=name)


def runnable(shape: ModelShape, *, name: str | None = None) -> ModelShape:
    """`shape` itself when this engine can run it; ModelShapeError listing what it lacks otherwise."""
    problems = [
        Problem(f"$.{key}", "is required to run the model")
        for key in ("hidden_size", "intermediate_size", "vocab_size")
        if getattr(shape, key) is None
    ]
    if shape.v_head_dim != shape.head_dim:
        problems.append(Problem("$.v_head_dim", f"must equal head_dim {shape.head_dim} here (got {shape.v_head_dim})"))
    if shape.swa_head_dim or shape.swa_num_key_value_heads or shape.swa_v_head_dim:
        problems.append(Problem("$.swa_head_dim", "the embedded model runs one head geometry for every layer"))
    if shape.rope_scaling is not None and shape.rope_scaling.rope_type not in ROPE_TYPES:
        problems.append(
            Problem(
                "$.rope_scaling.rope_type",
                f"{shape.rope_scaling.rope_type!r} is not implemented -- "
                f"the model runs {', '.join(ROPE_TYPES)} scaling or none",
            )
        )
    if problems:
        raise ModelShapeError(problems, header=f"model config{f' {name!r}' if name else ''} cannot be run")
    return shape


def run_sizes(shape: ModelShape) -> tuple[int, int, int]:
    """`(hidden_size, intermediate_size, vocab_size)` of a shape that `runnable_shape` accepted."""
    hidden, mlp, vocab = shape.hidden_size, shape.intermediate_size, shape.vocab_size
    if hidden is None or mlp is None or vocab is None:
        raise ValueError("the shape lacks sizes the model needs -- build it with runnable_shape(config)")
    return hidden, mlp, vocab


class ByteTokenizer:
    """UTF-8 bytes as tokens (vocab 256): any text round-trips, no vocabulary file needed."""

    vocab_size = 256

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        return list(text.encode("utf-8"))  # no special tokens to add

    def decode(self, ids: Sequence[int]) -> str:
        # A cut multi-byte character (a sampled stray byte) shows as U+FFFD rather than failing.
        return bytes(i & 0xFF for i in ids).decode("utf-8", errors="replace")


class LayerAttention(Protocol):
    """What a layer calls to attend: writes k/v for the new tokens and returns `[tokens, heads*dim]`."""

    def __call__(self, layer_id: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor: ...


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # in float32 whatever the model dtype, as the reference does: a bfloat16 mean of
        # squares loses enough to change greedy choices
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(x.dtype)


ROPE_TYPES = ("linear", "llama3")


def rope_inv_freq(shape: ModelShape) -> torch.Tensor:
    """Rotary inverse frequencies `[head_dim / 2]` (float32), stretched as `rope_scaling` says.

    `linear` divides every frequency by the factor; `llama3` divides only the low
    frequencies (wavelengths beyond `original_max_position_embeddings / low_freq_factor`),
    keeps the high ones and blends between the two.
    """
    dim = shape.head_dim
    inv = 1.0 / (shape.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64, device="cpu").float() / dim))
    scaling = shape.rope_scaling
    if scaling is None:
        return inv
    if scaling.rope_type == "linear":
        return inv / scaling.factor
    if scaling.rope_type != "llama3":
        raise FieldValueError(
            f"rope_type {scaling.rope_type!r} is not implemented -- use one of {', '.join(ROPE_TYPES)}"
        )
    original = scaling.original_max_position_embeddings or shape.max_position_embeddings or 8192
    low_wavelen = original / scaling.low_freq_factor
    high_wavelen = original / scaling.high_freq_factor
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wavelen, inv / scaling.factor, inv)
    smooth = (original / wavelen - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor)
    blended = (1 - smooth) * scaled / scaling.factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, blended, scaled)


def rotary_tables(
    positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(cos, sin)`, each `[tokens, 1, head_dim]`: computed once per forward, shared by every layer."""
    angles = positions.to(torch.float32)[:, None] * inv_freq.to(positions.device)[None, :]
    emb = torch.cat([angles, angles], dim=-1)
    return emb.cos()[:, None, :].to(dtype), emb.sin()[:, None, :].to(dtype)


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Apply rotary position embedding (rotate-half form) to `[tokens, heads, dim]`."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class DecoderLayer(nn.Module):
    def __init__(self, shape: ModelShape, layer_id: int) -> None:
        super().__init__()
        self.layer_id = layer_id
        self.shape = shape
        h, mlp, _vocab = run_sizes(shape)
        d = shape.head_dim
        bias = shape.attention_bias
        self.input_norm = RMSNorm(h, shape.rms_norm_eps)
        self.q_proj = nn.Linear(h, shape.num_attention_heads * d, bias=bias)
        self.k_proj = nn.Linear(h, shape.num_key_value_heads * d, bias=bias)
        self.v_proj = nn.Linear(h, shape.num_key_value_heads * d, bias=bias)
        self.o_proj = nn.Linear(shape.num_attention_heads * d, h, bias=shape.output_bias)
        self.post_norm = RMSNorm(h, shape.rms_norm_eps)
        self.gate_proj = nn.Linear(h, mlp, bias=False)
        self.up_proj = nn.Linear(h, mlp, bias=False)
        self.down_proj = nn.Linear(mlp, h, bias=False)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], attn: LayerAttention) -> torch.Tensor:
        s = self.shape
        n = x.shape[0]
        y = self.input_norm(x)
        q = self.q_proj(y).view(n, s.num_attention_heads, s.head_dim)
        k = self.k_proj(y).view(n, s.num_key_value_heads, s.head_dim)
        v = self.v_proj(y).view(n, s.num_key_value_heads, s.head_dim)
        q = rotary(q, *rope)
        k = rotary(k, *rope)
        x = x + self.o_proj(attn(self.layer_id, q, k, v))
        y = self.post_norm(x)
        return x + self.down_proj(nn.functional.silu(self.gate_proj(y)) * self.up_proj(y))


class TinyTransformer(nn.Module):
    """Decoder-only transformer of the Llama family: RMSNorm, RoPE, GQA attention (via a
    callable), SwiGLU MLP; q/k/v biases (Qwen2) and a head tied to the embedding as the
    shape says.

    `forward(ids, positions, attn)` takes a flat ragged batch (all new tokens of all
    requests, concatenated) and returns logits for every token; which rows matter is the
    caller's business. `TinyTransformer(shape, seed=...)` fills the weights from a seed;
    `TinyTransformer.empty(shape)` builds one with no storage at all, for a checkpoint
    to fill (`engine.weights`).
    """

    def __init__(self, shape: ModelShape, *, seed: int | None, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.shape = shape
        hidden, _mlp, vocab = run_sizes(shape)
        self.embed = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(DecoderLayer(shape, i) for i in range(shape.num_hidden_layers))
        self.norm = RMSNorm(hidden, shape.rms_norm_eps)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        self.inv_freq = rope_inv_freq(shape)  # a plain attribute: not a weight, never loaded
        if seed is not None:
            self._init_weights(seed)
        if shape.tie_word_embeddings:
            self.lm_head.weight = self.embed.weight
        self.to(dtype)
        self.requires_grad_(False)
        self.eval()

    @classmethod
    def empty(cls, shape: ModelShape, *, dtype: torch.dtype = torch.float32) -> TinyTransformer:
        """A model whose parameters have no storage (the meta device) until weights are assigned."""
        with torch.device("meta"):
            return cls(shape, seed=None, dtype=dtype)

    def _init_weights(self, seed: int) -> None:
        # One generator per parameter, seeded from (seed, name): the same seed gives the same
        # model everywhere, and a shallower model of the same widths (a draft) shares the
        # embedding, head and first layers with the deeper one, so it predicts it fairly well.
        with torch.no_grad():
            for name, p in self.named_parameters():
                gen = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                elif name == "embed.weight":
                    p.copy_(torch.randn(p.shape, generator=gen))
                elif name.endswith(".bias"):
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
                else:
                    p.copy_(torch.randn(p.shape, generator=gen) / p.shape[-1] ** 0.5)
            # A sharper output head keeps the top logit well separated, so greedy choices do not
            # hinge on float rounding differences between batched and unbatched kernels.
            self.lm_head.weight.mul_(4.0)

    @torch.no_grad()
    def forward(self, ids: torch.Tensor, positions: torch.Tensor, attn: LayerAttention) -> torch.Tensor:
        x = self.embed(ids)
        rope = rotary_tables(positions, self.inv_freq, x.dtype)
        for layer in self.layers:
            x = layer(x, rope, attn)
        return self.lm_head(self.norm(x)).float()


class DenseAttention:
    """Reference attention over one whole sequence: causal, sliding-window on SWA layers, no cache."""

    def __init__(self, shape: ModelShape) -> None:
        self.shape = shape

    def __call__(self, layer_id: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return dense_attention(q, k, v, window=self.shape.window_of(layer_id))


def dense_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, window: int | None, q_offset: int = 0
) -> torch.Tensor:
    """Causal GQA attention of `q` (positions q_offset..) over all of `k`/`v` (positions 0..).

    A query at position i sees keys j with j <= i and, with a window, i - j < window.
    Returns `[q_tokens, heads*dim]`.
    """
    nq, heads, dim = q.shape
    nk, kv_heads, _ = k.shape
    group = heads // kv_heads
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), k.float()) / dim**0.5
    qpos = torch.arange(nq, device=q.device)[:, None] + q_offset
    kpos = torch.arange(nk, device=q.device)[None, :]
    mask = kpos <= qpos
    if window is not None:
        mask &= (qpos - kpos) < window
    scores = scores.masked_fill(~mask[None], float("-inf"))
    out = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v.float())
    return out.reshape(nq, heads * dim).to(q.dtype)


def reference_generate(
    model: TinyTransformer, prompt: Sequence[int], max_new_tokens: int, *, ignore_eos: bool = False
) -> list[int]:
    """Greedy decoding with a dense forward over the whole sequence at every step (no cache).

    Slow on purpose: it is the oracle the paged engine is compared against. Stops at EOS
    unless `ignore_eos`.
    """
    ids = list(prompt)
    out: list[int] = []
    attn = DenseAttention(model.shape)
    for _ in range(max_new_tokens):
        t = torch.tensor(ids, dtype=torch.long)
        logits = model(t, torch.arange(len(ids)), attn)
        nxt = int(logits[-1].argmax())
        out.append(nxt)
        ids.append(nxt)
        if nxt == model.shape.eos_token_id and not ignore_eos:
            break
    return out


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype for a resolved dtype name (`float32`, `bfloat16`, ...)."""
    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[name]
