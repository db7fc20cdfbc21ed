"""attention: attention backends and SWA pool resolution.

Backends are chosen by name through `attention_backends()` (`create_attention_backend`),
read config only through accessors and their model runner, and find their SWA pool with
`resolve_swa_kv_pool(runner)`.
"""

from attention.base import AttentionBackend, ForwardMetadata, LayerKV
from attention.errors import AttentionBackendUnavailable, AttentionInputError
from attention.forward_batch import ForwardBatch, ForwardMode
from attention.layer import AttentionLayer, layer_window
from attention.registry import (
    HybridAttnBackend,
    available_backends,
    backend_class,
    create_attention_backend,
    register_backend,
    registered_backends,
)
from attention.runner import ModelRunnerLike, SimpleRunner
from attention.swa import (
    decide_swa_kv_pool,
    resolve_swa_kv_pool,
    translate_out_cache_loc,
    translate_page_table,
)
from attention.torch_native import TorchNativeBackend, attend

__all__ = [
    "AttentionBackend",
    "AttentionBackendUnavailable",
    "AttentionInputError",
    "AttentionLayer",
    "ForwardBatch",
    "ForwardMetadata",
    "ForwardMode",
    "HybridAttnBackend",
    "LayerKV",
    "ModelRunnerLike",
    "SimpleRunner",
    "TorchNativeBackend",
    "attend",
    "available_backends",
    "backend_class",
    "create_attention_backend",
    "decide_swa_kv_pool",
    "layer_window",
    "register_backend",
    "registered_backends",
    "resolve_swa_kv_pool",
    "translate_out_cache_loc",
    "translate_page_table",
]
