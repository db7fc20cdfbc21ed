"""The mem_cache front door: `__all__` is sorted (tests/test_facades.py checks each name is its module's object)."""

from __future__ import annotations

import mem_cache


def test_all_is_sorted() -> None:
    assert mem_cache.__all__ == sorted(mem_cache.__all__)
