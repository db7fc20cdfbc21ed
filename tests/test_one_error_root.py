"""Every exception the project raises on purpose derives from one root, `sgconf.errors.SgconfError`.

Private classes (a leading underscore) never leave the module that raises them: they
are caught there and turned into a public error. `tools/` is a program of its own that
reads other code bases and imports nothing of ours; its errors have their own roots
(`RatchetError`, `MutationError`).
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

from sgconf.errors import SgconfError

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sgconf", "runtime", "mem_cache", "attention", "engine")


def public_exceptions() -> list[type[BaseException]]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name == "__main__.py":  # runs a command on import
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            module = importlib.import_module(name)
            for attr, value in vars(module).items():
                if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == name:
                    if not attr.startswith("_"):
                        found.append(value)
    return found


def test_every_public_exception_derives_from_the_root() -> None:
    found = public_exceptions()
    assert len(found) > 30
    outside = sorted(f"{cls.__module__}.{cls.__qualname__}" for cls in found if not issubclass(cls, SgconfError))
    assert outside == []
