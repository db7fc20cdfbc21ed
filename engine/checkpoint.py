"""Where a served model's weights come from: `--load-format auto|safetensors|dummy`, decided once.

`auto` loads a checkpoint when the model directory has one. The shipped layouts
(`tiny`, `small-dense`, `llama-3.1-8b`, ...) are configs that come without weights by
nature, so they run on seeded random weights; any other config without weights (a
model directory holding only config.json, a `--model-config` file) is refused before
anything is allocated: serving random weights under a real model's name answers every
request with noise, and a full-size model would only be built to run out of memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from engine.weights import WeightsError, has_weights
from sgconf.errors import Problem
from sgconf.models import builtin_model_path

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
    if model.model_config is not None:
        return not Path(model.model_config).exists() and builtin_model_path(model.model_config) is not None
    return not Path(model.model_path).exists() and builtin_model_path(model.model_path) is not None


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
    msg = (f"no *.safetensors weights in {where} and load_format is {fmt!r} -- pass a checkpoint directory "
           "with --model-path, or --load-format dummy for random weights")
    raise WeightsError([Problem("$.model.load_format", msg)], header="the model has no weights")


__all__ = ["LOAD_FORMATS", "WeightsSource", "choose_weights", "model_directory"]
