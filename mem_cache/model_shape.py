"""The shape of a model, read from an HF-style `config.json` dict: the one parser of it.

Memory planning and the engine's model both read a model through `model_shape_from_config`,
so the layers a plan sizes as sliding-window are exactly the layers the model runs with
a window. Planning needs the layer count, KV heads and head sizes (full and
sliding-window geometry), which layers slide, and the draft layers of speculative
decoding; the model also needs the hidden, MLP and vocabulary sizes, norms, rotary base
and end-of-sequence ids, attention bias, tied embeddings and rotary scaling, which are
parsed here too (optional for a plan, checked by the engine before it builds a model).
Both spellings of a config are read: `torch_dtype`, `rope_theta` and `rope_scaling` as
older checkpoints write them, `dtype` and `rope_parameters` as newer ones do. Layer types come from, in order: `layer_types`;
`swa_attention_layer_ids` / `full_attention_layer_ids`; `sliding_window_pattern` (layer
i is full when `(i + 1) % pattern == 0`); otherwise every layer slides when a window is
set (and `use_sliding_window` is not false), else none does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from mem_cache.errors import ModelShapeError
from sgconf.dump import json_type
from sgconf.errors import Problem

SLIDING = "sliding_attention"
FULL = "full_attention"
DTYPE_BYTES = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}


@attrs.frozen(slots=True)
class RopeScaling:
    """How rotary frequencies are stretched for long contexts (`rope_scaling` / `rope_parameters`).

    `rope_type` is kept as written, so a plan still works for a kind the model code does
    not implement; the engine refuses those before it builds a model.
    """

    rope_type: str
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int | None = None


@attrs.frozen(slots=True)
class ModelShape:
    """A model's attention layout; layer ids are global (0 .. num_hidden_layers - 1)."""

    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    v_head_dim: int
    swa_attention_layer_ids: tuple[int, ...]
    full_attention_layer_ids: tuple[int, ...]
    sliding_window: int | None = None
    swa_num_key_value_heads: int | None = None
    swa_head_dim: int | None = None
    swa_v_head_dim: int | None = None
    # draft depths (layer ids of the draft/MTP model) whose sliding-window ring is full capacity
    mtp_local_layer_ids: tuple[int, ...] | None = None
    num_nextn_predict_layers: int = 0
    torch_dtype: str = "bfloat16"
    max_position_embeddings: int | None = None
    name: str | None = None
    # what running the model needs beyond its KV cache (None where the config does not say)
    hidden_size: int | None = None
    intermediate_size: int | None = None
    vocab_size: int | None = None
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    eos_token_id: int | None = None
    # every id that ends a sequence (`eos_token_id` may list several); the first is eos_token_id
    eos_token_ids: tuple[int, ...] = ()
    model_type: str | None = None
    attention_bias: bool = False  # on the q, k and v projections
    output_bias: bool = False  # on the output projection (Llama's attention_bias; never in Qwen2)
    tie_word_embeddings: bool = False
    rope_scaling: RopeScaling | None = None

    # ---- layer kinds -------------------------------------------------------------------
    @property
    def swa_kv_heads(self) -> int:
        return self.swa_num_key_value_heads or self.num_key_value_heads

    @property
    def swa_k_dim(self) -> int:
        return self.swa_head_dim or self.head_dim

    @property
    def swa_v_dim(self) -> int:
        return self.swa_v_head_dim or (self.swa_head_dim or self.v_head_dim)

    def has_swa_layers(self, *, disable_hybrid_swa_memory: bool = False) -> bool:
        """Whether any layer gets a sliding-window pool (never when hybrid SWA memory is disabled)."""
        return bool(self.swa_attention_layer_ids) and self.sliding_window is not None and not disable_hybrid_swa_memory

    def is_hybrid_swa(self, *, disable_hybrid_swa_memory: bool = False) -> bool:
        """Both kinds of layer present and SWA memory not disabled."""
        return self.has_swa_layers(disable_hybrid_swa_memory=disable_hybrid_swa_memory) and bool(
            self.full_attention_layer_ids
        )

    def is_swa_layer(self, layer_id: int) -> bool:
        return layer_id in self.swa_attention_layer_ids

    @property
    def layer_types(self) -> tuple[str, ...]:
        """`sliding_attention` / `full_attention` for every layer, in order."""
        swa = set(self.swa_attention_layer_ids)
        return tuple(SLIDING if i in swa else FULL for i in range(self.num_hidden_layers))

    @property
    def swa_window(self) -> int | None:
        """The sliding window when some layer slides, else None (a config may set a window no layer uses)."""
        return self.sliding_window if self.swa_attention_layer_ids else None

    def window_of(self, layer_id: int) -> int | None:
        """The sliding window of a layer, None for a full-attention layer."""
        if not 0 <= layer_id < self.num_hidden_layers:
            raise IndexError(f"layer {layer_id} is not in 0..{self.num_hidden_layers - 1}")
        return self.sliding_window if layer_id in self.swa_attention_layer_ids else None

    def local_layer_ids(self, start: int, end: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """`(swa, full)` global layer ids inside a pipeline stage's `[start, end)` range."""
        return (
            tuple(i for i in self.swa_attention_layer_ids if start <= i < end),
            tuple(i for i in self.full_attention_layer_ids if start <= i < end),
        )

    # ---- bytes -------------------------------------------------------------------------
    def full_bytes_per_layer(self, elt: int) -> int:
        """Bytes one token costs in one full-attention layer (k and v): `kv_heads*(head_dim+v_head_dim)*elt`."""
        return self.num_key_value_heads * (self.head_dim + self.v_head_dim) * elt

    def swa_bytes_per_layer(self, elt: int) -> int:
        """Bytes one token costs in one sliding-window layer, with the SWA geometry."""
        return self.swa_kv_heads * (self.swa_k_dim + self.swa_v_dim) * elt

    # ---- tensor parallelism --------------------------------------------------------------
    def per_rank(self, tp_size: int) -> ModelShape:
        """What one of `tp_size` attention ranks holds: its share of the KV heads.

        Heads split evenly when there are at least as many KV heads as ranks; with fewer,
        each rank holds one head and every head is replicated on `tp_size / kv_heads`
        ranks (as the usual runtimes do), so a rank never holds less than one head.
        Raises PlanError when neither divides the other.
        """
        if tp_size == 1:
            return self
        heads = _heads_per_rank(self.num_key_value_heads, tp_size, "num_key_value_heads")
        swa = None
        if self.swa_num_key_value_heads is not None:
            swa = _heads_per_rank(self.swa_num_key_value_heads, tp_size, "swa_num_key_value_heads")
        return attrs.evolve(
            self,
            num_attention_heads=max(1, self.num_attention_heads // tp_size),
            num_key_value_heads=heads,
            swa_num_key_value_heads=swa,
        )

    # ---- drafts ------------------------------------------------------------------------
    def mtp_draft_shape(self, num_layers: int | None = None) -> ModelShape:
        """The draft model of the model's own next-token (MTP) layers, with the target's geometry.

        Depths listed in `mtp_local_layer_ids` slide (full-capacity rings); the others
        are full attention. Without MTP layers declared, a one-layer full-attention draft
        (an EAGLE head) is assumed.
        """
        n = num_layers or self.num_nextn_predict_layers or 1
        local = tuple(i for i in (self.mtp_local_layer_ids or ()) if i < n)
        return attrs.evolve(
            self,
            num_hidden_layers=n,
            swa_attention_layer_ids=local,
            full_attention_layer_ids=tuple(i for i in range(n) if i not in local),
            mtp_local_layer_ids=local if self.mtp_local_layer_ids is not None else None,
            num_nextn_predict_layers=0,
            name=f"{self.name or 'model'}-draft",
        )


def _heads_per_rank(heads: int, tp_size: int, key: str) -> int:
    if heads >= tp_size and heads % tp_size == 0:
        return heads // tp_size
    if heads < tp_size and tp_size % heads == 0:
        return 1
    from mem_cache.errors import PlanError

    msg = (
        f"'{key}' {heads} does not split over tp_size {tp_size}: ranks must share heads evenly "
        f"-- use a tp_size that divides {heads} or is a multiple of it (--tp-size)"
    )
    raise PlanError(msg)


def _problem(key: str, message: str) -> Problem:
    return Problem(f"$.{key}", message)


def _int(
    cfg: Mapping[str, Any], key: str, problems: list[Problem], *, required: bool = False, minimum: int = 1
) -> int | None:
    value = cfg.get(key)
    if value is None:
        if required:
            problems.append(_problem(key, "is required"))
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        problems.append(_problem(key, f"must be an integer >= {minimum} (got {value!r})"))
        return None
    return value


def _float(cfg: Mapping[str, Any], key: str, default: float, problems: list[Problem]) -> float:
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0 or value == float("inf"):
        problems.append(_problem(key, f"must be a positive number (got {value!r})"))
        return default
    return float(value)


def _first_int(value: Any) -> int | None:
    """`eos_token_id` may be one id or a list of them; the first one ends a sequence here."""
    if isinstance(value, list):
        value = value[0] if value else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _all_ints(value: Any) -> tuple[int, ...]:
    items = value if isinstance(value, list) else [value]
    return tuple(i for i in items if isinstance(i, int) and not isinstance(i, bool))


def _rope(cfg: Mapping[str, Any], problems: list[Problem]) -> tuple[float, RopeScaling | None]:
    """`(rope_theta, scaling)` from `rope_theta` + `rope_scaling`, or from `rope_parameters`."""
    params = cfg.get("rope_parameters")
    if params is not None and not isinstance(params, Mapping):
        problems.append(_problem("rope_parameters", f"must be an object (got {params!r})"))
        params = None
    theta_src: Mapping[str, Any] = cfg if "rope_theta" in cfg or params is None else params
    theta = _float(theta_src, "rope_theta", 10000.0, problems)
    scaling = cfg.get("rope_scaling")
    key = "rope_scaling"
    if scaling is None and params is not None:
        scaling, key = params, "rope_parameters"
    if scaling is None:
        return theta, None
    if not isinstance(scaling, Mapping):
        problems.append(_problem(key, f"must be an object (got {scaling!r})"))
        return theta, None
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if not isinstance(kind, str):
        problems.append(_problem(f"{key}.rope_type", f"must be a string (got {kind!r})"))
        return theta, None
    if kind == "default":
        return theta, None
    factor = _float(scaling, "factor", 1.0, problems)
    low = _float(scaling, "low_freq_factor", 1.0, problems)
    high = _float(scaling, "high_freq_factor", 4.0, problems)
    original = _int(scaling, "original_max_position_embeddings", problems)
    return theta, RopeScaling(kind, factor, low, high, original)


def _ids(cfg: Mapping[str, Any], key: str, n: int, problems: list[Problem]) -> tuple[int, ...] | None:
    value = cfg.get(key)
    if value is None:
        return None
    if (
        not isinstance(value, Sequence)
        or isinstance(value, str)
        or not all(isinstance(i, int) and not isinstance(i, bool) for i in value)
    ):
        problems.append(_problem(key, f"must be a list of layer ids (got {value!r})"))
        return None
    bad = [i for i in value if not 0 <= i < n]
    if bad:
        problems.append(_problem(key, f"layer ids {bad} are outside 0..{n - 1}"))
        return None
    return tuple(sorted(set(value)))


def _layer_kinds(
    cfg: Mapping[str, Any], n: int, window: int | None, problems: list[Problem]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    types = cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != n:
            problems.append(_problem("layer_types", f"must be a list of {n} entries, one per layer"))
            return (), tuple(range(n))
        unknown = sorted({repr(t) for t in types if t not in (SLIDING, FULL)})
        if unknown:
            problems.append(
                _problem("layer_types", f"unknown layer types {', '.join(unknown)} -- use '{SLIDING}' or '{FULL}'")
            )
            return (), tuple(range(n))
        return tuple(i for i, t in enumerate(types) if t == SLIDING), tuple(i for i, t in enumerate(types) if t == FULL)
    swa = _ids(cfg, "swa_attention_layer_ids", n, problems)
    full = _ids(cfg, "full_attention_layer_ids", n, problems)
    if swa is not None or full is not None:
        if swa is None:
            swa = tuple(i for i in range(n) if i not in (full or ()))
        if full is None:
            full = tuple(i for i in range(n) if i not in swa)
        if set(swa) & set(full) or len(swa) + len(full) != n:
            problems.append(
                _problem(
                    "swa_attention_layer_ids",
                    "swa_attention_layer_ids and full_attention_layer_ids must split the layers exactly",
                )
            )
        return swa, full
    pattern = cfg.get("sliding_window_pattern")
    if pattern is not None:
        if isinstance(pattern, bool) or not isinstance(pattern, int) or pattern < 1:
            problems.append(_problem("sliding_window_pattern", f"must be an integer >= 1 (got {pattern!r})"))
            return (), tuple(range(n))
        full = tuple(i for i in range(n) if (i + 1) % pattern == 0)
        return tuple(i for i in range(n) if i not in full), full
    if window is not None and cfg.get("use_sliding_window", True) is not False:
        return tuple(range(n)), ()
    return (), tuple(range(n))


def model_shape_from_config(cfg: Mapping[str, Any], *, name: str | None = None) -> ModelShape:
    """Build a ModelShape from an HF-style config dict.

    Raises ModelShapeError listing every bad or missing key as `$.<key>: ...`.
    """
    if not isinstance(cfg, Mapping):
        raise ModelShapeError([Problem("$", f"a model config must be a JSON object (got {json_type(cfg)})")])
    problems: list[Problem] = []
    n = _int(cfg, "num_hidden_layers", problems, required=True)
    heads = _int(cfg, "num_attention_heads", problems, required=True)
    kv_heads = _int(cfg, "num_key_value_heads", problems) or heads
    head_dim = _int(cfg, "head_dim", problems)
    if heads and kv_heads and heads % kv_heads:
        problems.append(_problem("num_key_value_heads", f"{kv_heads} does not divide num_attention_heads {heads}"))
    if head_dim is None and heads:
        hidden = cfg.get("hidden_size")
        if hidden is None:
            problems.append(_problem("head_dim", "is required when hidden_size is not given"))
        elif not isinstance(hidden, int) or isinstance(hidden, bool) or hidden < 1:
            pass  # reported once, below, with the other sizes
        elif hidden % heads:
            problems.append(
                _problem("hidden_size", f"{hidden} is not divisible by num_attention_heads {heads} -- give head_dim")
            )
        else:
            head_dim = hidden // heads
    v_head_dim = _int(cfg, "v_head_dim", problems) or head_dim
    window = _int(cfg, "sliding_window", problems)
    if window is None:
        window = _int(cfg, "sliding_window_size", problems)
    dtype = cfg.get("torch_dtype", cfg.get("dtype", "bfloat16"))
    if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
        problems.append(_problem("torch_dtype", f"unknown dtype {dtype!r} -- use one of {sorted(DTYPE_BYTES)}"))
    nextn = _int(cfg, "num_nextn_predict_layers", problems, minimum=0) or 0
    max_pos = _int(cfg, "max_position_embeddings", problems)
    swa_kv = _int(cfg, "swa_num_key_value_heads", problems)
    swa_dim = _int(cfg, "swa_head_dim", problems)
    swa_v_dim = _int(cfg, "swa_v_head_dim", problems)
    hidden_size = _int(cfg, "hidden_size", problems)
    intermediate = _int(cfg, "intermediate_size", problems)
    vocab = _int(cfg, "vocab_size", problems)
    norm_eps = _float(cfg, "rms_norm_eps", 1e-6, problems)
    rope_theta, rope_scaling = _rope(cfg, problems)
    model_type = cfg.get("model_type")
    # Qwen2 always has q/k/v biases and writes no flag for them; Llama-family configs say so
    bias = cfg.get("attention_bias", model_type == "qwen2")
    swa: tuple[int, ...] = ()
    full: tuple[int, ...] = ()
    mtp_local = None
    if n is not None:
        swa, full = _layer_kinds(cfg, n, window, problems)
        if swa and window is None:
            problems.append(_problem("sliding_window", f"is required: layers {list(swa)[:8]} use a sliding window"))
        if cfg.get("mtp_local_layer_ids") is not None:
            depth = nextn or n
            mtp_local = _ids(cfg, "mtp_local_layer_ids", max(depth, 1), problems)
    if problems:
        raise ModelShapeError(problems, header=f"invalid model config{f' {name!r}' if name else ''}")
    assert n is not None and heads is not None and head_dim is not None and v_head_dim is not None
    assert kv_heads is not None
    return ModelShape(
        num_hidden_layers=n,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=v_head_dim,
        swa_attention_layer_ids=swa,
        full_attention_layer_ids=full,
        sliding_window=window,
        swa_num_key_value_heads=swa_kv,
        swa_head_dim=swa_dim,
        swa_v_head_dim=swa_v_dim,
        mtp_local_layer_ids=mtp_local,
        num_nextn_predict_layers=nextn,
        torch_dtype=str(dtype),
        max_position_embeddings=max_pos,
        name=name,
        hidden_size=hidden_size,
        intermediate_size=intermediate,
        vocab_size=vocab,
        rms_norm_eps=norm_eps,
        rope_theta=rope_theta,
        eos_token_id=_first_int(cfg.get("eos_token_id")),
        eos_token_ids=_all_ints(cfg.get("eos_token_id")),
        model_type=model_type if isinstance(model_type, str) else None,
        attention_bias=bool(bias),
        output_bias=bool(cfg.get("attention_bias", False)) and model_type != "qwen2",
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        rope_scaling=rope_scaling,
    )


def is_hybrid_swa_mtp_draft(
    shape: ModelShape, *, is_draft_worker: bool, draft_model_idx: int | None, disable_hybrid_swa_memory: bool = False
) -> bool:
    """A draft worker for one given depth of a hybrid-SWA model that declares `mtp_local_layer_ids`.

    Decided from metadata only, never from the architecture name.
    """
    return (
        is_draft_worker
        and draft_model_idx is not None
        and shape.is_hybrid_swa(disable_hybrid_swa_memory=disable_hybrid_swa_memory)
        and shape.mtp_local_layer_ids is not None
    )


def draft_swa_full_capacity(
    shape: ModelShape,
    draft: ModelShape,
    *,
    is_draft_worker: bool,
    draft_model_idx: int | None,
    disable_hybrid_swa_memory: bool = False,
) -> bool:
    """`is_hybrid_swa_mtp_draft` and the draft depth is a sliding-window layer of the draft."""
    return (
        is_hybrid_swa_mtp_draft(
            shape,
            is_draft_worker=is_draft_worker,
            draft_model_idx=draft_model_idx,
            disable_hybrid_swa_memory=disable_hybrid_swa_memory,
        )
        and draft_model_idx in draft.swa_attention_layer_ids
    )


__all__ = [
    "ModelShape",
    "RopeScaling",
    "draft_swa_full_capacity",
    "is_hybrid_swa_mtp_draft",
    "model_shape_from_config",
]
