"""The engine's KV memory: the budget is the declared setting, and a plan that does not fit names it."""

from __future__ import annotations

import pytest

from engine.memory import build_memory
from engine.model import runnable_shape
from mem_cache.errors import InsufficientMemoryError
from runtime import get_context, override_server_args
from sgconf.serving.models import builtin_model_config


def test_a_plan_over_the_cpu_budget_names_the_setting_that_raises_it() -> None:
    """On cpu the budget is kv_cache_memory_bytes (64MiB unless set): a refusal asks for more of it, never a fraction."""
    cfg = builtin_model_config("tiny")
    with override_server_args(device="cpu", context_length=1_000_000, max_running_requests=64):
        assert get_context().explain("kv_cache_memory_bytes")[-1].describe() == (
            "from resolution:schedule_defaults (default for cpu: no device memory is measured there)"
        )
        with pytest.raises(InsufficientMemoryError) as info:
            build_memory(get_context().snapshot(), runnable_shape(cfg))
    # 65 rows of 1000004 int32 columns alone exceed 64 MiB
    assert info.value.lines() == [
        "$.kv_cache_memory_bytes: the KV cache needs at least 260041848 bytes, the budget is 67108864 bytes "
        "(from --kv-cache-memory-bytes) -- raise --kv-cache-memory-bytes to at least 260041848 bytes (0.25GiB)"
    ]
