"""Finding a model's HF-style config.json: the embedded `tiny` model, a directory, or a file path."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from sgconf.errors import ConfigError, Problem

BUILTIN_MODELS = ("tiny",)


def builtin_model_config(name: str) -> dict[str, Any]:
    """The config dict of an embedded model (`tiny`)."""
    text = resources.files("sgconf.builtin_models").joinpath(f"{name}.json").read_text()
    return json.loads(text)


def load_model_config(model_path: str, model_config: str | None = None) -> dict[str, Any]:
    """Read the HF-style config for a model: `model_config` wins, then `model_path`.

    Raises ConfigError naming the field and the path when the file is missing or not JSON.
    """
    if model_config is not None:
        return _read(Path(model_config), "$.model.model_config", "pass the path of an HF-style config.json")
    if model_path in BUILTIN_MODELS:
        return builtin_model_config(model_path)
    path = Path(model_path)
    fix = f"pass a directory holding config.json, or an embedded model: {', '.join(map(repr, BUILTIN_MODELS))}"
    return _read(path / "config.json" if path.is_dir() else path, "$.model.model_path", fix)


def _read(path: Path, field_path: str, fix: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError([Problem(field_path, f"no model config at '{path}' -- {fix}")]) from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError([Problem(field_path, f"cannot read model config '{path}': {exc}")]) from None
    if not isinstance(data, dict):
        raise ConfigError([Problem(field_path, f"model config '{path}' must be a JSON object")])
    return data
