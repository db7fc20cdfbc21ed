"""Backend selection by name through the attention_backends() accessor."""

from __future__ import annotations

import pytest
import torch

import attention
from attention import (
    AttentionBackendUnavailable,
    HybridAttnBackend,
    TorchNativeBackend,
    available_backends,
    create_attention_backend,
    register_backend,
    registered_backends,
)
from mem_cache.allocator import TokenToKVPoolAllocator
from mem_cache.pools import MHATokenToKVPool, ReqToTokenPool
from runtime import get_context, override_server_args
from sgconf.errors import ConfigError, DeclarationError
from sgconf.serving.plugins import ATTENTION_BACKENDS


class AltBackend(TorchNativeBackend):
    name = "test_alt"


class GpuOnlyBackend(TorchNativeBackend):
    name = "test_gpu_only"

    @classmethod
    def unavailable_reason(cls) -> str | None:
        return "needs a CUDA device"


@pytest.fixture
def extra_backends():
    for cls in (AltBackend, GpuOnlyBackend):
        register_backend(cls)
    yield
    for cls in (AltBackend, GpuOnlyBackend):
        ATTENTION_BACKENDS.unregister(cls.name)


@pytest.fixture
def runner():
    pool = MHATokenToKVPool(16, 1, torch.float32, 1, 4, layer_ids=(0,))
    return attention.SimpleRunner(pool, TokenToKVPoolAllocator(16, kvcache=pool), ReqToTokenPool(2, 8), None)


def test_default_is_torch_native(runner):
    """With no backend configured, resolution picks torch_native and one backend serves both phases."""
    with override_server_args():
        backend = create_attention_backend(runner)
    assert type(backend) is TorchNativeBackend
    assert backend.runner is runner


def test_torch_native_is_always_available():
    assert "torch_native" in registered_backends()
    assert "torch_native" in available_backends()


def test_different_prefill_and_decode_backends(runner, extra_backends):
    """Distinct prefill and decode names give a hybrid that routes by batch mode."""
    with override_server_args(attention_backend="torch_native", decode_attention_backend="test_alt"):
        backend = create_attention_backend(runner)
    assert isinstance(backend, HybridAttnBackend)
    assert type(backend.prefill_backend) is TorchNativeBackend
    assert type(backend.decode_backend) is AltBackend
    assert backend.name == "torch_native+test_alt"


def test_override_is_seen_at_next_construction(runner, extra_backends):
    """The names are read through the accessor, so a scoped change is honoured."""
    with override_server_args(attention_backend="torch_native"):
        assert type(create_attention_backend(runner)) is TorchNativeBackend
        with override_server_args(attention_backend="test_alt"):
            assert type(create_attention_backend(runner)) is AltBackend


def test_snapshot_selects_from_that_generation(runner, extra_backends):
    """A snapshot passed in decides, even when the live context says otherwise."""
    with override_server_args(attention_backend="test_alt"):
        snap = get_context().snapshot()
        with override_server_args(attention_backend="torch_native"):
            assert type(create_attention_backend(runner, snapshot=snap)) is AltBackend


def test_unknown_backend_is_refused_by_the_config_with_the_registered_ones(extra_backends):
    """An unknown decode backend never reaches a build: the setting names the registry's entries."""
    with pytest.raises(ConfigError) as info:
        override_server_args(decode_attention_backend="flashinfr").install()
    assert info.value.lines() == [
        "$.exec.kernel.decode_attention_backend: must name a registered attention backend "
        "(test_alt, test_gpu_only, torch_native), got 'flashinfr' (from override_server_args)"
    ]


def test_unknown_backend_by_name_lists_the_available_ones(runner, extra_backends):
    """Named directly (not through the config), an unknown backend is refused listing what would work."""
    with pytest.raises(AttentionBackendUnavailable) as info:
        create_attention_backend(runner, names=("torch_native", "flashinfer"))
    assert info.value.lines() == [
        "$.exec.kernel.decode_attention_backend: unknown attention backend 'flashinfer' for decode "
        "-- choose one of: test_alt, torch_native"
    ]
    assert isinstance(info.value, LookupError)


def test_unavailable_backend_says_why(runner, extra_backends):
    """A registered backend that cannot run here is refused with its reason; nothing is built."""
    with pytest.raises(AttentionBackendUnavailable) as info:
        create_attention_backend(runner, names=("test_gpu_only", "torch_native"))
    assert info.value.lines() == [
        "$.exec.kernel.prefill_attention_backend: attention backend 'test_gpu_only' for prefill cannot run here: "
        "needs a CUDA device -- choose one of: test_alt, torch_native"
    ]


def test_registering_a_taken_name_fails():
    class Impostor(TorchNativeBackend):
        name = "torch_native"

    with pytest.raises(
        DeclarationError, match="attention backend 'torch_native' is registered twice: by attention.torch_native"
    ):
        register_backend(Impostor)
    assert register_backend(TorchNativeBackend) is TorchNativeBackend


def test_front_door_exports():
    """`attention.__all__` is sorted (tests/test_facades.py checks each name is its module's object)."""
    assert attention.__all__ == sorted(attention.__all__)


def test_hybrid_routes_by_batch_mode(runner, extra_backends):
    """Extend batches reach the prefill backend and decode batches the decode backend."""
    backend = create_attention_backend(runner, names=("torch_native", "test_alt"))
    table = runner.req_to_token_pool
    row = table.alloc(1)[0]
    table.write(row, 0, torch.tensor([1, 2, 3]))
    extend = attention.ForwardBatch.extend(
        req_pool_indices=[row], seq_lens=[2], extend_prefix_lens=[0], out_cache_loc=[1, 2]
    )
    decode = attention.ForwardBatch.decode(req_pool_indices=[row], seq_lens=[3], out_cache_loc=[3])
    x = torch.ones(2, 1, 4)
    backend.forward(x, x, x, 0, extend)
    backend.forward(x[:1], x[:1], x[:1], 0, decode)
    assert backend.prefill_backend._meta.batch is extend
    assert backend.decode_backend._meta.batch is decode


def test_error_names_the_field_the_name_came_from(runner, extra_backends):
    """A phase falling back to attention_backend blames attention_backend, not the unset phase field."""
    with override_server_args(attention_backend="test_gpu_only", decode_attention_backend="torch_native"):
        with pytest.raises(AttentionBackendUnavailable) as info:
            create_attention_backend(runner)
    assert info.value.lines() == [
        "$.exec.kernel.attention_backend: attention backend 'test_gpu_only' for prefill cannot run here: "
        "needs a CUDA device -- choose one of: test_alt, torch_native"
    ]
    with override_server_args(attention_backend="torch_native", decode_attention_backend="test_gpu_only"):
        snap = get_context().snapshot()
    with pytest.raises(AttentionBackendUnavailable) as info:
        create_attention_backend(runner, snapshot=snap)
    assert info.value.lines()[0].startswith("$.exec.kernel.decode_attention_backend: attention backend 'test_gpu_only'")
