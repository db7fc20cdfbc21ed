"""The embedded model: a small deterministic transformer, its byte tokenizer and a dense reference.

The model exists so that every config consumer (pools, allocators, attention backends,
the prefix cache, HiCache) is exercised end to end by real generation. Weights are random
but reproducible: they come from one seed. Sizes come from an HF-style config dict
(`sgconf.models.load_model_config`), so the same code runs the embedded hybrid-SWA
`tiny` model and any small config a test writes.

Attention is not computed here: each layer hands its projected q/k/v to an attention
callable (`LayerAttention`), which is the paged backend inside the engine and
`DenseAttention` for the reference forward. Keeping the rest of the math in one place
is what makes "paged equals dense" a meaningful test.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs
import torch
from torch import nn

from sgconf.errors import ConfigError, Problem

SLIDING = "sliding_attention"
FULL = "full_attention"


@attrs.frozen(slots=True)
class ModelShape:
    """The sizes of a decoder-only transformer, read from an HF-style config."""

    num_layers: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    sliding_window: int | None
    layer_types: tuple[str, ...]
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    eos_token_id: int | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ModelShape:
        """Read the sizes; raises ConfigError naming every missing or bad key."""
        problems: list[Problem] = []

        def need(key: str) -> int:
            value = config.get(key)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                problems.append(Problem(f"$.model_config.{key}", f"must be a positive integer, got {value!r}"))
                return 1
            return value

        layers = need("num_hidden_layers")
        hidden = need("hidden_size")
        heads = need("num_attention_heads")
        kv_heads = config.get("num_key_value_heads", heads)
        head_dim = config.get("head_dim") or (hidden // heads if heads else 0)
        window = config.get("sliding_window")
        layer_types = _layer_types(config, layers, window)
        shape = cls(
            num_layers=layers,
            hidden_size=hidden,
            intermediate_size=need("intermediate_size"),
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            vocab_size=need("vocab_size"),
            max_position_embeddings=int(config.get("max_position_embeddings", 2048)),
            sliding_window=window if any(t == SLIDING for t in layer_types) else None,
            layer_types=layer_types,
            rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
            rope_theta=float(config.get("rope_theta", 10000.0)),
            eos_token_id=_first_int(config.get("eos_token_id")),
        )
        if not problems and heads % max(kv_heads, 1):
            problems.append(
                Problem("$.model_config.num_key_value_heads", f"must divide num_attention_heads {heads}, got {kv_heads}")
            )
        if problems:
            raise ConfigError(problems, header="invalid model config")
        return shape

    def window_of(self, layer_id: int) -> int | None:
        """The sliding window of a layer, None for a full-attention layer."""
        return self.sliding_window if self.layer_types[layer_id] == SLIDING else None

    @property
    def swa_layer_ids(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.layer_types) if t == SLIDING)

    @property
    def full_layer_ids(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.layer_types) if t != SLIDING)


def _layer_types(config: Mapping[str, Any], layers: int, window: Any) -> tuple[str, ...]:
    types = config.get("layer_types")
    if isinstance(types, list) and len(types) == layers:
        return tuple(SLIDING if t == SLIDING else FULL for t in types)
    swa_ids = config.get("swa_attention_layer_ids")
    if isinstance(swa_ids, list):
        return tuple(SLIDING if i in swa_ids else FULL for i in range(layers))
    if isinstance(window, int) and window > 0:
        return (SLIDING,) * layers
    return (FULL,) * layers


def _first_int(value: Any) -> int | None:
    if isinstance(value, list):
        value = value[0] if value else None
    return value if isinstance(value, int) else None


class ByteTokenizer:
    """UTF-8 bytes as tokens (vocab 256): any text round-trips, no vocabulary file needed."""

    vocab_size = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

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
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + self.eps) * self.weight


def rotary(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Apply rotary position embedding (rotate-half form) to `[tokens, heads, dim]`."""
    dim = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float32, device=x.device) / dim))
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    cos = torch.cat([angles.cos(), angles.cos()], dim=-1)[:, None, :].to(x.dtype)
    sin = torch.cat([angles.sin(), angles.sin()], dim=-1)[:, None, :].to(x.dtype)
    half = dim // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class DecoderLayer(nn.Module):
    def __init__(self, shape: ModelShape, layer_id: int) -> None:
        super().__init__()
        self.layer_id = layer_id
        self.shape = shape
        h, d = shape.hidden_size, shape.head_dim
        self.input_norm = RMSNorm(h, shape.rms_norm_eps)
        self.q_proj = nn.Linear(h, shape.num_heads * d, bias=False)
        self.k_proj = nn.Linear(h, shape.num_kv_heads * d, bias=False)
        self.v_proj = nn.Linear(h, shape.num_kv_heads * d, bias=False)
        self.o_proj = nn.Linear(shape.num_heads * d, h, bias=False)
        self.post_norm = RMSNorm(h, shape.rms_norm_eps)
        self.gate_proj = nn.Linear(h, shape.intermediate_size, bias=False)
        self.up_proj = nn.Linear(h, shape.intermediate_size, bias=False)
        self.down_proj = nn.Linear(shape.intermediate_size, h, bias=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, attn: LayerAttention) -> torch.Tensor:
        s = self.shape
        n = x.shape[0]
        y = self.input_norm(x)
        q = self.q_proj(y).view(n, s.num_heads, s.head_dim)
        k = self.k_proj(y).view(n, s.num_kv_heads, s.head_dim)
        v = self.v_proj(y).view(n, s.num_kv_heads, s.head_dim)
        q = rotary(q, positions, s.rope_theta)
        k = rotary(k, positions, s.rope_theta)
        x = x + self.o_proj(attn(self.layer_id, q, k, v))
        y = self.post_norm(x)
        return x + self.down_proj(nn.functional.silu(self.gate_proj(y)) * self.up_proj(y))


class TinyTransformer(nn.Module):
    """Decoder-only transformer: RMSNorm, RoPE, GQA attention (via a callable), SwiGLU MLP.

    `forward(ids, positions, attn)` takes a flat ragged batch (all new tokens of all
    requests, concatenated) and returns logits for every token; which rows matter is the
    caller's business.
    """

    def __init__(self, shape: ModelShape, *, seed: int, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.shape = shape
        self.embed = nn.Embedding(shape.vocab_size, shape.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(shape, i) for i in range(shape.num_layers))
        self.norm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)
        self.lm_head = nn.Linear(shape.hidden_size, shape.vocab_size, bias=False)
        self._init_weights(seed)
        self.to(dtype)
        self.requires_grad_(False)
        self.eval()

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
                else:
                    p.copy_(torch.randn(p.shape, generator=gen) / p.shape[-1] ** 0.5)
            # A sharper output head keeps the top logit well separated, so greedy choices do not
            # hinge on float rounding differences between batched and unbatched kernels.
            self.lm_head.weight.mul_(4.0)

    @torch.no_grad()
    def forward(self, ids: torch.Tensor, positions: torch.Tensor, attn: LayerAttention) -> torch.Tensor:
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x, positions, attn)
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
