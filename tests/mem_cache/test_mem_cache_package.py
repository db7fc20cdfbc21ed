"""The mem_cache front door: every name in `__all__` imports, and the list is sorted."""

from __future__ import annotations

import importlib

import mem_cache


def test_all_names_import() -> None:
    """`__all__` is sorted (tests/test_facades.py checks each name is its module's object)."""
    module = importlib.import_module("mem_cache")
    assert mem_cache.__all__ == sorted(mem_cache.__all__)
