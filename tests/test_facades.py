"""Each package's front door states its public names once, and every one of them is the object its module defines."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

import runtime
import sgconf

ROOT = Path(__file__).resolve().parents[1]


def sgconf_sources() -> dict[str, str]:
    return import_sources("sgconf")


def import_sources(package: str) -> dict[str, str]:
    """name -> module, from the `from X import ...` lines of a package's front door."""
    tree = ast.parse((ROOT / package.replace(".", "/") / "__init__.py").read_text(encoding="utf-8"))
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module != "__future__":
            for alias in node.names:
                if alias.name == "*":  # a star import brings its module's `__all__`
                    out.update(dict.fromkeys(importlib.import_module(node.module).__all__, node.module))
                else:
                    out[alias.asname or alias.name] = node.module
    return out


def runtime_sources() -> dict[str, str]:
    from runtime import serving

    return {**runtime._MODULE_OF, **dict.fromkeys(serving.__all__, "runtime.serving")}


FACADES = [
    (sgconf, sgconf_sources),
    (runtime, runtime_sources),
    (importlib.import_module("mem_cache"), lambda: import_sources("mem_cache")),
    (importlib.import_module("mem_cache.hicache"), lambda: import_sources("mem_cache.hicache")),
    (importlib.import_module("attention"), lambda: import_sources("attention")),
    (importlib.import_module("tools.ratchet"), lambda: import_sources("tools.ratchet")),
]


@pytest.mark.parametrize(
    ("facade", "sources"),
    FACADES,
    ids=["sgconf", "runtime", "mem_cache", "mem_cache.hicache", "attention", "tools.ratchet"],
)
def test_every_public_name_imports_and_is_the_defining_modules_object(facade, sources) -> None:
    names = facade.__all__
    assert len(names) == len(set(names)) and names
    homes = sources()
    assert set(names) == set(homes)
    for name in names:
        assert getattr(facade, name) is getattr(importlib.import_module(homes[name]), name), name


def test_the_runtime_facade_lists_the_serving_accessors_without_naming_them() -> None:
    from runtime import serving

    assert set(serving.__all__) <= set(runtime.__all__)
    assert runtime.get_memory is serving.get_memory
    with pytest.raises(AttributeError, match="no attribute 'get_nothing'"):
        runtime.get_nothing  # noqa: B018


def test_sgconf_all_is_derived_from_its_imports() -> None:
    public = {n for n, v in vars(sgconf).items() if not n.startswith("_") and not inspect.ismodule(v)}
    assert set(sgconf.__all__) == public
