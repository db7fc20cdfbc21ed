"""Where a served model's weights come from: `--load-format auto|safetensors|dummy`, decided once.

`auto` loads a checkpoint when the model directory has one. The shipped layouts
(`tiny`, `small-dense`, `llama-3.1-8b`, ...) are configs that come without weights by
nature, so they run on seeded random weights; any other config without weights (a
model directory holding only config.json, a `--model-config` file) is refused before
anything is allocated: serving random weights under a real model's name answers every
request with noise, and a full-size model would only be built to run out of memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import torch

from engine.model import TinyTransformer
from engine.weights import (
    Checkpoint,
    WeightsError,
    check_checkpoint,
    check_model_type,
    find_checkpoint,
    has_weights,
    load_weights,
)
from mem_cache.examples import EMBEDDED, example_path
from mem_cache.model_shape import ModelShape
from sgconf.errors import Problem

LOAD_FORMATS = ("auto", "safetensors", "dummy")


@attrs.frozen(slots=True)
class WeightsSource:
    """The decision: `safetensors` from `directory`, or `dummy` (random weights from the seed)."""

    load_format: str
    directory: Path | None
    reason: str

    @property
    def is_checkpoint(self) -> bool:
        return self.load_format == "safetensors"


def model_directory(model: Any) -> Path | None:
    """The model directory `model_path` names, or None for a shipped model's name."""
    path = Path(model.model_path)
    return path if path.is_dir() else None


def _is_shipped(model: Any) -> bool:
    name = model.model_config if model.model_config is not None else model.model_path
    return not Path(name).exists() and (name == EMBEDDED or example_path(name) is not None)


def choose_weights(snap: Any) -> WeightsSource:
    """Decide the weights for the config snapshot `snap`; WeightsError (one line naming the fix) when there are none."""
    model = snap.model
    fmt = str(model.load_format)
    directory = model_directory(model)
    if fmt == "dummy":
        return WeightsSource("dummy", None, "--load-format dummy")
    if directory is not None and has_weights(directory):
        return WeightsSource("safetensors", directory, f"safetensors in '{directory}'")
    if fmt == "auto" and _is_shipped(model):
        return WeightsSource("dummy", None, "a shipped layout, which has no weights")
    where = f"'{directory}'" if directory is not None else f"'{model.model_path}' (not a directory)"
    msg = (
        f"no *.safetensors weights in {where} and load_format is {fmt!r} -- pass a checkpoint directory "
        "with --model-path, or --load-format dummy for random weights"
    )
    raise WeightsError([Problem("$.model.load_format", msg)], header="the model has no weights")


def read_checkpoint(source: WeightsSource, shape: ModelShape, config: Mapping[str, Any]) -> Checkpoint | None:
    """The checkpoint's tensor table, checked against the config (headers only: nothing allocated)."""
    if not source.is_checkpoint or source.directory is None:
        return None
    check_model_type(shape, config)
    checkpoint = find_checkpoint(source.directory)
    check_checkpoint(checkpoint, shape)
    return checkpoint


def build_model(
    checkpoint: Checkpoint | None, shape: ModelShape, *, dtype: torch.dtype, device: str, seed: int
) -> TinyTransformer:
    """The checkpoint's weights when there is one, else random ones from `seed`."""
    if checkpoint is not None:
        return load_weights(checkpoint, shape, dtype=dtype, device=device)
    return TinyTransformer(shape, seed=seed, dtype=dtype).to(device)


def draft_model(
    snap: Any, shape: ModelShape, target: Checkpoint | None, *, dtype: torch.dtype, device: str, seed: int
) -> TinyTransformer:
    """The draft's weights: its own checkpoint, else the target checkpoint's embedding, first
    layers and head (an early exit of the target, tensors shared by name), else random ones."""
    spec = snap.spec
    own = spec.speculative_draft_model_path
    if own is not None and has_weights(Path(own)):
        checkpoint = find_checkpoint(Path(own))
        check_checkpoint(checkpoint, shape)
        return load_weights(checkpoint, shape, dtype=dtype, device=device)
    if own is None and spec.speculative_draft_model_config is None:
        return build_model(target, shape, dtype=dtype, device=device, seed=seed)
    return TinyTransformer(shape, seed=seed, dtype=dtype).to(device)


__all__ = [
    "LOAD_FORMATS",
    "WeightsSource",
    "build_model",
    "choose_weights",
    "draft_model",
    "model_directory",
    "read_checkpoint",
]
