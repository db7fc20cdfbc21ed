"""Example model configs shipped for `sgconf plan` and the tests: small made-up models and
the published attention layouts of public models, as HF-style config.json dicts."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any


def example_names() -> list[str]:
    """Names of the shipped examples, sorted (`sgconf plan --model-config NAME`)."""
    return sorted(p.name[: -len(".json")] for p in resources.files(__name__).iterdir() if p.name.endswith(".json"))


def example_path(name: str) -> Path | None:
    """The file of a shipped example, or None when `name` is not one."""
    if name not in example_names():
        return None
    return Path(str(resources.files(__name__).joinpath(f"{name}.json")))


def load_example(name: str) -> dict[str, Any]:
    """The config dict of a shipped example; KeyError naming the choices when unknown."""
    path = example_path(name)
    if path is None:
        raise KeyError(f"no example model {name!r} -- choose one of {', '.join(example_names())}")
    return json.loads(path.read_text())


__all__ = ["example_names", "example_path", "load_example"]
