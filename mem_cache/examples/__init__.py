"""Example model configs for `sgconf plan` and the tests: small made-up models and the published
attention layouts of public models, as HF-style config.json dicts.

The files are sgconf's shipped models (`sgconf/serving/builtin_models/`), so `show`, `plan` and
`serve` accept the same names; this module lists them without the embedded `tiny`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sgconf.errors import UnknownNameError
from sgconf.serving.models import builtin_model_config, builtin_model_names, builtin_model_path

EMBEDDED = "tiny"


def example_names() -> list[str]:
    """Names of the shipped examples, sorted (`sgconf plan --model-config NAME`)."""
    return [name for name in builtin_model_names() if name != EMBEDDED]


def example_path(name: str) -> Path | None:
    """The file of a shipped example, or None when `name` is not one."""
    return builtin_model_path(name) if name != EMBEDDED else None


def load_example(name: str) -> dict[str, Any]:
    """The config dict of a shipped example; UnknownNameError (a KeyError) naming the choices when unknown."""
    if example_path(name) is None:
        raise UnknownNameError(f"no example model {name!r} -- choose one of {', '.join(example_names())}")
    return builtin_model_config(name)


__all__ = ["example_names", "example_path", "load_example"]
