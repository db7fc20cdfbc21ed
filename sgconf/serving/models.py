"""Finding a model's HF-style config.json: a shipped model by name, a directory, or a file path.

The shipped models live in `sgconf/serving/builtin_models/` as data: `tiny` (the embedded default
the engine serves), small made-up layouts and the published attention layouts of public
models (`llama-3.1-8b`, `gemma-3-27b`, ...). They sit here, not in `mem_cache`, so that
every command that takes a model path or a model config (`show`, `plan`, `serve`) accepts
the same names while the dependency arrows still point one way: `mem_cache.examples`
reads them from here.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from sgconf.errors import ConfigError, Problem, UnknownNameError
from sgconf.suggest import did_you_mean

_PACKAGE = "sgconf.serving.builtin_models"


def builtin_model_names() -> list[str]:
    """Names of the shipped models, sorted (`tiny`, `small-dense`, `llama-3.1-8b`, ...)."""
    files = resources.files(_PACKAGE).iterdir()
    return sorted(p.name[: -len(".json")] for p in files if p.name.endswith(".json"))


def builtin_model_path(name: str) -> Path | None:
    """The config.json file of a shipped model, or None when `name` is not one."""
    if name not in builtin_model_names():
        return None
    return Path(str(resources.files(_PACKAGE).joinpath(f"{name}.json")))


def builtin_model_config(name: str) -> dict[str, Any]:
    """The config dict of a shipped model; UnknownNameError (a KeyError) naming the choices when unknown."""
    path = builtin_model_path(name)
    if path is None:
        raise UnknownNameError(
            f"no shipped model {name!r}{did_you_mean(name, builtin_model_names(), normalize=False)} -- "
            f"choose one of {', '.join(builtin_model_names())}"
        )
    return json.loads(path.read_text())


# kept for callers that listed the embedded model by name
BUILTIN_MODELS = tuple(builtin_model_names())


def load_model_config(model_path: str, model_config: str | None = None) -> dict[str, Any]:
    """Read the HF-style config for a model: `model_config` wins, then `model_path`.

    Either may name a shipped model. Raises ConfigError naming the field and the path
    when the file is missing or not JSON, with a did-you-mean for a mistyped name.
    """
    if model_config is not None:
        return _load(model_config, "$.model.model_config", directory=False)
    return _load(model_path, "$.model.model_path", directory=True)


def _load(value: str, field_path: str, *, directory: bool) -> dict[str, Any]:
    path = Path(value)
    if not path.exists():
        shipped = builtin_model_path(value)
        if shipped is not None:
            return json.loads(shipped.read_text())
    names = builtin_model_names()
    what = "a directory holding config.json" if directory else "the path of an HF-style config.json"
    fix = f"pass {what}, or a shipped model: {', '.join(names)}"
    if directory and path.is_dir():
        path = path / "config.json"
    if not path.exists() and "/" not in value and not value.endswith(".json"):
        hint = did_you_mean(value, names, normalize=False)
        msg = f"'{value}' is neither a file nor a shipped model{hint} -- {fix}"
        raise ConfigError([Problem(field_path, msg)])
    return _read(path, field_path, fix)


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
