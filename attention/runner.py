"""The model-runner shape attention backends depend on, and a plain holder that has it.

Backends never see a whole model runner: only the pools, the allocator, whether this
is a draft worker and for which speculative algorithm, the model's shape and the
device. Keeping the surface this small is what lets tests drive a backend with real
pools and no mocks, and lets the embedded engine hand in its own runner unchanged.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import attrs


@runtime_checkable
class ModelRunnerLike(Protocol):
    """What an attention backend reads from its model runner.

    `token_to_kv_pool` is the runner's *active* KV pool and may be swapped at any time
    (memory-pool resizing, a draft worker taking its own pool); backends must not keep
    a pool they resolved from it across a swap.
    """

    token_to_kv_pool: Any
    token_to_kv_pool_allocator: Any
    req_to_token_pool: Any
    is_draft_worker: bool
    spec_algorithm: str | None
    model_shape: Any
    device: Any


@attrs.define(slots=True, eq=False)
class SimpleRunner:
    """A mutable holder of the runner surface: the base of the engine's model runner, and a runner for tests.

    It is mutable on purpose: a real runner swaps its pool in place, and the backends
    must follow. A runner is one object, not a value: two compare equal only when they
    are the same one.
    """

    token_to_kv_pool: Any
    token_to_kv_pool_allocator: Any
    req_to_token_pool: Any
    model_shape: Any
    is_draft_worker: bool = False
    spec_algorithm: str | None = None
    device: Any = "cpu"

    def swap_pool(self, pool: Any, allocator: Any | None = None) -> None:
        """Replace the active KV pool (and the allocator when given)."""
        self.token_to_kv_pool = pool
        if allocator is not None:
            self.token_to_kv_pool_allocator = allocator


def algorithm_name(algorithm: Any) -> str | None:
    """The speculative algorithm as an upper-case name, whether given as a string or an enum."""
    if algorithm is None:
        return None
    name = getattr(algorithm, "name", algorithm)
    return str(name).upper()
