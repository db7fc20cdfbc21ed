"""The engine's KV memory: a plan refused on CPU names the mem_fraction_static that fits, never the start-up cap."""

from __future__ import annotations

import pytest

from engine.memory import CPU_KV_BUDGET_BYTES, build_memory
from engine.model import runnable_shape
from mem_cache.errors import InsufficientMemoryError
from runtime import get_context, override_server_args
from sgconf.serving.models import builtin_model_config


def test_refusal_over_the_cpu_cap_names_the_device_budget() -> None:
    """A plan that fits neither the CPU cap nor the device budget is refused against the device budget."""
    cfg = builtin_model_config("tiny")
    with override_server_args(device="cpu", mem_fraction_static=0.02, context_length=1_000_000, max_running_requests=64):
        with pytest.raises(InsufficientMemoryError) as info:
            build_memory(get_context().snapshot(), runnable_shape(cfg), cfg)
    # 4 GiB (CPU) * 0.02 = 85899345 bytes, above the 64 MiB cap; 65 rows of 1000004 int32 columns alone exceed it
    assert 85899345 > CPU_KV_BUDGET_BYTES
    assert info.value.lines() == [
        "$.schedule.mem_fraction_static: the KV cache needs at least 260041848 bytes, the budget is 85899345 bytes "
        "(mem_fraction_static 0.02) -- raise --mem-fraction-static to at least 0.07"
    ]
