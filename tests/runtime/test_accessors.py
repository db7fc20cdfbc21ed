"""Tests for runtime.accessors: typed bags, derived accessors, live reads vs snapshot reads."""

from __future__ import annotations

import pytest

import runtime
from runtime import (
    NotPublishedError,
    attention_backends,
    configured_pp_size,
    get_context,
    get_device,
    get_disagg,
    get_exec,
    get_memory,
    get_model,
    get_observability,
    get_parallel,
    get_schedule,
    get_serving,
    get_spec,
    mamba_extra_buffer_enabled,
    mamba_extra_buffer_lazy_enabled,
    max_speculative_num_draft_tokens,
)
from sgconf.serving import namespaces as ns
from sgconf.serving.plugins import ATTENTION_BACKENDS

ACCESSORS = [
    (get_model, ns.ModelConfig),
    (get_device, ns.DeviceConfig),
    (get_parallel, ns.ParallelConfig),
    (get_memory, ns.MemoryConfig),
    (get_schedule, ns.ScheduleConfig),
    (get_spec, ns.SpecConfig),
    (get_disagg, ns.DisaggConfig),
    (get_serving, ns.ServingConfig),
    (get_observability, ns.ObservabilityConfig),
    (get_exec, ns.ExecConfig),
]
DERIVED = [
    max_speculative_num_draft_tokens,
    mamba_extra_buffer_enabled,
    mamba_extra_buffer_lazy_enabled,
    configured_pp_size,
    attention_backends,
]


@pytest.mark.parametrize(("accessor", "cls"), ACCESSORS)
def test_accessor_returns_typed_bag(sgconf_context, accessor, cls):
    """Each accessor returns its namespace's bag, the same object the snapshot holds."""
    bag = accessor()
    assert type(bag) is cls
    name = accessor.__name__.removeprefix("get_")
    assert getattr(sgconf_context.snapshot(), name) is bag


@pytest.mark.parametrize("accessor", [a for a, _ in ACCESSORS] + DERIVED)
def test_every_accessor_raises_before_publish(accessor):
    """Before publish, each accessor raises NotPublishedError naming how to publish."""
    with pytest.raises(NotPublishedError, match=r"runtime.publish\(record, role=...\)"):
        accessor()


def test_nested_exec_bags(sgconf_context):
    """exec holds kernel, graph and mamba children."""
    assert get_exec().kernel.attention_backend == "torch_native"
    assert get_exec().graph.enable_torch_compile is False
    assert get_exec().mamba.mamba_radix_cache_strategy == "no_buffer"


@pytest.fixture
def named_backends():
    """Backends registered under short names, so settings may name them (the registry checks every name)."""
    names = ("a", "p", "d", "x")
    for name in names:
        ATTENTION_BACKENDS.register(name, type(f"Backend_{name}", (), {"name": name}))
    yield
    for name in names:
        ATTENTION_BACKENDS.unregister(name)


@pytest.mark.usefixtures("named_backends")
def test_attention_backends_fall_back_per_phase():
    """Prefill takes its own backend; decode falls back to attention_backend."""
    with runtime.override_server_args(attention_backend="a", prefill_attention_backend="p"):
        assert attention_backends() == ("p", "a")


@pytest.mark.usefixtures("named_backends")
def test_attention_backends_decode_override():
    """Decode takes its own backend; prefill falls back."""
    with runtime.override_server_args(attention_backend="a", decode_attention_backend="d"):
        assert attention_backends() == ("a", "d")


@pytest.mark.parametrize(
    ("strategy", "enabled", "lazy"),
    [("no_buffer", False, False), ("extra_buffer", True, False), ("extra_buffer_lazy", True, True)],
)
def test_mamba_extra_buffer(strategy, enabled, lazy):
    """The extra buffer is on for both extra-buffer strategies; lazy only for the lazy one."""
    with runtime.override_server_args(mamba_radix_cache_strategy=strategy):
        assert mamba_extra_buffer_enabled() is enabled
        assert mamba_extra_buffer_lazy_enabled() is lazy


@pytest.mark.server_args(pp_size=4)
def test_configured_pp_size():
    """configured_pp_size reads the parallel bag."""
    assert configured_pp_size() == 4


def test_max_draft_tokens_without_spec_is_zero(sgconf_context):
    """Without speculation the draft-token bound is 0."""
    assert max_speculative_num_draft_tokens() == 0


@pytest.mark.server_args(speculative_algorithm="EAGLE", speculative_num_steps=3, speculative_eagle_topk=2)
def test_max_draft_tokens_is_max_of_active_and_capacity():
    """The bound is the larger of the active count and the publish-time capacity, and follows overrides."""
    ctx = get_context()
    assert get_spec().speculative_num_draft_tokens == 7
    assert max_speculative_num_draft_tokens() == 7
    ctx.override("adaptive", speculative_num_draft_tokens=5)
    assert max_speculative_num_draft_tokens() == 7  # capacity kept at publish
    with ctx.scoped(max_speculative_num_draft_tokens=4):
        assert max_speculative_num_draft_tokens() == 5  # the active count wins
    ctx.override("adaptive", speculative_num_draft_tokens=7)


@pytest.mark.usefixtures("named_backends")
def test_derived_accessors_read_the_given_snapshot(sgconf_context):
    """Given a snapshot, a derived accessor reads it, not the live context."""
    snap = sgconf_context.snapshot()
    with sgconf_context.scoped(attention_backend="x", pp_size=2, mamba_radix_cache_strategy="extra_buffer"):
        assert attention_backends() == ("x", "x")
        assert attention_backends(snap) == ("torch_native", "torch_native")
        assert configured_pp_size(snap) == 1 and configured_pp_size() == 2
        assert mamba_extra_buffer_enabled(snap) is False and mamba_extra_buffer_enabled() is True
        assert snap.configured_pp_size() == 1
        assert snap.mamba_extra_buffer_lazy_enabled() is False
        assert snap.max_speculative_num_draft_tokens() == 0


def test_accessor_reads_follow_overrides(sgconf_context):
    """An accessor read after an override sees the new value; the held bag does not change."""
    held = get_serving()
    sgconf_context.override("http", stream_interval=3)
    assert held.stream_interval == 1
    assert get_serving().stream_interval == 3
    sgconf_context.override("http", stream_interval=1)


def test_parallel_derived_members(sgconf_context):
    """Derived members of the parallel bag are available through the accessor."""
    with sgconf_context.scoped(tp_size=4, dp_size=2, enable_dp_attention=True):
        assert get_parallel().attn_tp_size == 2
        assert get_parallel().attn_dp_size == 2


@pytest.mark.slow  # runs mypy: `make test-fast` leaves it out
def test_accessors_are_typed_for_mypy(tmp_path) -> None:
    """`accessor(LoraConfig)` is a zero-argument function mypy knows returns a LoraConfig; built-ins are made alike."""
    import sys

    from mypy import api

    snippet = tmp_path / "typed.py"
    snippet.write_text(
        "from sgconf import Schema, setting\n"
        "from runtime import accessor, get_memory\n"
        "schema = Schema('typed')\n"
        "@schema.namespace('lora')\n"
        "class LoraConfig:\n"
        "    max_loras: int = setting(4, help='adapters')\n"
        "get_lora = accessor(LoraConfig)\n"
        "reveal_type(get_lora)\n"
        "reveal_type(get_lora().max_loras)\n"
        "reveal_type(get_memory().hicache_ratio)\n"
        "get_lora().max_loras + 'x'\n"
    )
    limit = sys.getrecursionlimit()
    try:
        out, _, status = api.run([str(snippet), "--cache-dir", str(tmp_path / "cache"), "--no-error-summary"])
    finally:
        sys.setrecursionlimit(limit)  # mypy raises it for the whole process; later tests rely on the default
    lines = [line.split(": ", 1)[1] for line in out.splitlines() if ": " in line]
    assert lines == [
        'note: Revealed type is "def () -> typed.LoraConfig"',
        'note: Revealed type is "int"',
        'note: Revealed type is "float"',
        'error: Unsupported operand types for + ("int" and "str")  [operator]',
    ]
    assert status == 1
