"""The mem_cache front door: every name in `__all__` imports, and the list is sorted."""

from __future__ import annotations

import importlib

import mem_cache


def test_all_names_import() -> None:
    """Each public name resolves on the package, and `__all__` is sorted."""
    module = importlib.import_module("mem_cache")
    assert mem_cache.__all__ == sorted(mem_cache.__all__)
    for name in mem_cache.__all__:
        assert getattr(module, name) is not None, name
