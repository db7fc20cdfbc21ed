"""A checkpoint's weights: its safetensors files, checked against the model, then loaded into it.

Reading a checkpoint happens in two steps so that nothing is allocated for a checkpoint
that cannot run: `find_checkpoint` reads only the file headers (names, dtypes, shapes),
`check_checkpoint` compares them with the tensors the model needs and reports each
missing, misshapen, unexpected or unloadable tensor by name, and only then does
`load_weights` fill a storage-less model one tensor at a time, each converted to the
model's dtype on the way. Files are opened memory-mapped by the `safetensors` library,
so a tensor's bytes are read once, when it is copied into the model.

The names are those of the Llama family (`model.layers.N.self_attn.q_proj.weight`, ...),
which Llama, Mistral and Qwen2 checkpoints share; `expected_tensors` is the one table
mapping them to this model's parameters.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import torch

from engine.errors import WeightsError  # declared there; re-exported for existing imports
from engine.model import TinyTransformer, run_sizes
from mem_cache.model_shape import DTYPE_BYTES, ModelShape
from sgconf.errors import ConfigError, Problem

INDEX_FILE = "model.safetensors.index.json"
# tensors some checkpoints carry that are derived, not learned: rebuilt from the config
DERIVED_SUFFIXES = (".rotary_emb.inv_freq",)
# the model families whose tensor names and math this model implements
MODEL_TYPES = ("llama", "mistral", "qwen2")
SAFETENSORS_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}
SHOWN = 5  # problems of one kind listed by name before the rest are counted

_LAYER_PARTS = {
    "self_attn.q_proj": "q_proj",
    "self_attn.k_proj": "k_proj",
    "self_attn.v_proj": "v_proj",
    "self_attn.o_proj": "o_proj",
    "mlp.gate_proj": "gate_proj",
    "mlp.up_proj": "up_proj",
    "mlp.down_proj": "down_proj",
    "input_layernorm": "input_norm",
    "post_attention_layernorm": "post_norm",
}


@attrs.frozen(slots=True)
class TensorInfo:
    """Where one tensor lives and what it is, from the file header alone."""

    file: Path
    dtype: str
    shape: tuple[int, ...]


@attrs.frozen(slots=True)
class Checkpoint:
    """The tensors of a checkpoint directory, by name, read from the headers of its files."""

    directory: Path
    tensors: Mapping[str, TensorInfo]

    @property
    def files(self) -> tuple[Path, ...]:
        return tuple(sorted({t.file for t in self.tensors.values()}))


def _error(directory: Path, messages: list[str], header: str) -> WeightsError:
    return WeightsError([Problem("$.model.model_path", m) for m in messages], header=header)


def has_weights(directory: Path) -> bool:
    """Whether a directory holds safetensors weights (a single file or shards)."""
    return directory.is_dir() and (any(directory.glob("*.safetensors")) or (directory / INDEX_FILE).exists())


def find_checkpoint(directory: Path) -> Checkpoint:
    """Read the headers of the checkpoint in `directory` (sharded with an index, or not).

    Raises WeightsError when there are no weights, the index is unreadable, it names a
    shard that is not there, or one tensor is stored twice.
    """
    from safetensors import SafetensorError, safe_open

    index = directory / INDEX_FILE
    if index.exists():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            names = {str(k): directory / str(v) for k, v in dict(weight_map).items()}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise _error(directory, [f"cannot read '{index}': {exc}"], "unreadable checkpoint index") from None
        files = sorted(set(names.values()))
        missing = [f.name for f in files if not f.exists()]
        if missing:
            msg = f"shard '{missing[0]}' named by '{index.name}' is missing from '{directory}'"
            raise _error(
                directory,
                [msg + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")],
                "incomplete checkpoint",
            )
    else:
        files = sorted(directory.glob("*.safetensors"))
        names = {}
    if not files:
        raise _error(
            directory,
            [
                f"no *.safetensors weights in '{directory}' -- pass a checkpoint directory, "
                "or --load-format dummy for random weights"
            ],
            "no weights",
        )
    tensors: dict[str, TensorInfo] = {}
    for path in files:
        try:
            with safe_open(str(path), framework="pt") as f:
                for name in f.keys():
                    if name in tensors:
                        raise _error(
                            directory,
                            [f"tensor '{name}' is stored twice: in '{tensors[name].file.name}' and '{path.name}'"],
                            "inconsistent checkpoint",
                        )
                    if names and names.get(name) != path:
                        continue  # the index decides which shard a tensor comes from
                    sl = f.get_slice(name)
                    tensors[name] = TensorInfo(path, str(sl.get_dtype()), tuple(int(d) for d in sl.get_shape()))
        except (OSError, SafetensorError) as exc:
            raise _error(directory, [f"cannot read '{path}': {exc}"], "unreadable checkpoint") from None
    lost = sorted(n for n in names if n not in tensors)
    if lost:
        raise _error(
            directory,
            [f"tensor '{lost[0]}' is listed in '{INDEX_FILE}' but not stored in '{names[lost[0]].name}'"],
            "inconsistent checkpoint",
        )
    return Checkpoint(directory, tensors)


def expected_tensors(shape: ModelShape) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Checkpoint name -> (parameter name of this model, shape), for every tensor the model needs."""
    hidden, mlp, vocab = run_sizes(shape)
    q = shape.num_attention_heads * shape.head_dim
    kv = shape.num_key_value_heads * shape.head_dim
    out: dict[str, tuple[str, tuple[int, ...]]] = {"model.embed_tokens.weight": ("embed.weight", (vocab, hidden))}
    for i in range(shape.num_hidden_layers):
        sizes: dict[str, tuple[int, ...]] = {
            "self_attn.q_proj.weight": (q, hidden),
            "self_attn.k_proj.weight": (kv, hidden),
            "self_attn.v_proj.weight": (kv, hidden),
            "self_attn.o_proj.weight": (hidden, q),
            "mlp.gate_proj.weight": (mlp, hidden),
            "mlp.up_proj.weight": (mlp, hidden),
            "mlp.down_proj.weight": (hidden, mlp),
            "input_layernorm.weight": (hidden,),
            "post_attention_layernorm.weight": (hidden,),
        }
        if shape.attention_bias:
            sizes |= {"self_attn.q_proj.bias": (q,), "self_attn.k_proj.bias": (kv,), "self_attn.v_proj.bias": (kv,)}
        if shape.output_bias:
            sizes["self_attn.o_proj.bias"] = (hidden,)
        for part, size in sizes.items():
            module, _, kind = part.rpartition(".")
            out[f"model.layers.{i}.{part}"] = (f"layers.{i}.{_LAYER_PARTS[module]}.{kind}", size)
    out["model.norm.weight"] = ("norm.weight", (hidden,))
    if not shape.tie_word_embeddings:
        out["lm_head.weight"] = ("lm_head.weight", (vocab, hidden))
    return out


def weights_bytes(shape: ModelShape, dtype: str) -> int:
    """Bytes the model's weights take in `dtype` (a tied head counted once)."""
    elt = DTYPE_BYTES[dtype]
    total = 0
    for _param, size in expected_tensors(shape).values():
        n = 1
        for d in size:
            n *= d
        total += n * elt
    return total


def check_model_type(shape: ModelShape, config: Mapping[str, Any]) -> None:
    """Refuse a checkpoint of a family whose math this model does not implement (before reading it)."""
    problems = []
    if shape.model_type not in MODEL_TYPES:
        problems.append(
            Problem(
                "$.model_type",
                f"{shape.model_type!r} checkpoints are not implemented -- "
                f"this engine runs {', '.join(MODEL_TYPES)}; --load-format dummy runs random weights",
            )
        )
    act = config.get("hidden_act", "silu")
    if act != "silu":
        problems.append(Problem("$.hidden_act", f"{act!r} is not implemented -- the MLP here is SwiGLU (silu)"))
    if config.get("mlp_bias"):
        problems.append(Problem("$.mlp_bias", "MLP biases are not implemented"))
    if problems:
        raise ConfigError(problems, header="the checkpoint's architecture cannot be run")


def check_checkpoint(ckpt: Checkpoint, shape: ModelShape) -> None:
    """Every tensor the model needs is there, with its shape and a loadable dtype; nothing else is.

    Raises WeightsError naming the tensors (the first few of each kind, then a count).
    """
    expected = expected_tensors(shape)
    messages: list[str] = []

    def report(kind: str, items: list[str]) -> None:
        for item in items[:SHOWN]:
            messages.append(f"{kind}: {item}")
        if len(items) > SHOWN:
            messages.append(f"{kind}: {len(items) - SHOWN} more")

    missing = [f"'{n}'" for n in expected if n not in ckpt.tensors]
    report("missing tensor", missing)
    wrong = [
        f"'{n}' has shape {list(ckpt.tensors[n].shape)}, the config needs {list(size)}"
        for n, (_p, size) in expected.items()
        if n in ckpt.tensors and ckpt.tensors[n].shape != size
    ]
    report("shape mismatch", wrong)
    dtypes = [
        f"'{n}' is stored as {t.dtype} -- quantized or integer weights are not supported"
        for n, t in ckpt.tensors.items()
        if n in expected and t.dtype not in SAFETENSORS_DTYPES
    ]
    report("unsupported dtype", dtypes)
    spare = [
        f"'{n}'"
        for n in ckpt.tensors
        if n not in expected
        and not n.endswith(DERIVED_SUFFIXES)
        and not (n == "lm_head.weight" and shape.tie_word_embeddings)
    ]
    report("unexpected tensor", spare)
    if messages:
        raise _error(
            ckpt.directory,
            [f"{m} (in '{ckpt.directory}')" for m in messages],
            "the checkpoint does not match its config.json",
        )


def load_weights(ckpt: Checkpoint, shape: ModelShape, *, dtype: torch.dtype, device: str = "cpu") -> TinyTransformer:
    """A model with the checkpoint's weights, in `dtype` on `device`; call `check_checkpoint` first."""
    from safetensors import safe_open

    model = TinyTransformer.empty(shape, dtype=dtype)
    expected = expected_tensors(shape)
    by_file: dict[Path, list[str]] = {}
    for name in expected:
        by_file.setdefault(ckpt.tensors[name].file, []).append(name)
    with torch.no_grad():
        for path, names in sorted(by_file.items()):
            with safe_open(str(path), framework="pt", device="cpu") as f:
                for name in names:
                    param_name, _size = expected[name]
                    module_name, _, attr = param_name.rpartition(".")
                    tensor = f.get_tensor(name).to(device=device, dtype=dtype)
                    setattr(model.get_submodule(module_name), attr, torch.nn.Parameter(tensor, requires_grad=False))
    if shape.tie_word_embeddings:
        model.lm_head.weight = model.embed.weight
    left = [n for n, p in model.named_parameters() if p.is_meta]
    assert not left, f"parameters left unloaded: {left}"  # expected_tensors covers every parameter
    return model


__all__ = [
    "Checkpoint",
    "TensorInfo",
    "WeightsError",
    "check_checkpoint",
    "check_model_type",
    "expected_tensors",
    "find_checkpoint",
    "has_weights",
    "load_weights",
    "weights_bytes",
]
