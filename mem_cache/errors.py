"""Exceptions raised by memory planning, pools and allocators.

Each also subclasses a builtin so callers can catch either: a double free is a
`ValueError`, a foreign index an `IndexError`, a plan that does not fit a `MemoryError`.
Running out of free slots is not an exception: allocators return None (see allocator.py).
"""

from __future__ import annotations

from sgconf.errors import ConfigError, Problem, SgconfError


class PoolError(SgconfError):
    """Raised when a pool or allocator is used against its contract."""


class DoubleFreeError(PoolError, ValueError):
    """Raised when a slot, page or row is freed that is not currently allocated."""


class ForeignIndexError(PoolError, IndexError):
    """Raised when an index is outside the pool or names a reserved slot (slot/page/row 0)."""


class ModelShapeError(ConfigError):
    """Raised when a model config cannot describe a KV-cache shape; each problem names the key."""


class PlanError(ConfigError):
    """Raised when a KV memory plan cannot be made from the given settings."""


class InsufficientMemoryError(PlanError, MemoryError):
    """Raised when the KV pools do not fit the budget; `min_budget_bytes` (and, for a budget
    derived from device memory, `min_mem_fraction_static`) says what would."""

    def __init__(
        self,
        message: str,
        *,
        min_mem_fraction_static: float | None = None,
        min_budget_bytes: int | None = None,
        path: str = "$.schedule.mem_fraction_static",
    ) -> None:
        self.min_mem_fraction_static = min_mem_fraction_static
        self.min_budget_bytes = min_budget_bytes
        super().__init__([Problem(path, message)], header="not enough memory for the KV cache")


__all__ = [
    "DoubleFreeError",
    "ForeignIndexError",
    "InsufficientMemoryError",
    "ModelShapeError",
    "PlanError",
    "PoolError",
]
