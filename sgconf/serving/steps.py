"""The resolution steps of the serving schema: each turns a `None`/`"auto"` into a recorded decision.

Steps run in `STEPS` order; each is a typed `Step` naming the fields it reads, so a copy of
the serving schema that leaves a namespace out drops the steps that would read it. They
consult `ResolveInputs`: the device kind found on this host and the model's config.json.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

import attrs

from sgconf.errors import ConfigError
from sgconf.hooks import Step, Values
from sgconf.serving.models import load_model_config
from sgconf.serving.rules import TREE_DRAFT_ALGORITHMS

# Defaults by device kind, chosen to leave room for activations and graphs on GPU.
MEM_FRACTION_STATIC = {"cuda": 0.88, "cpu": 0.8}
CHUNKED_PREFILL_SIZE = {"cuda": 8192, "cpu": 2048}
# A CPU has no device memory to measure, so the KV budget there is a size of its own: the
# embedded models need little, and zero-filled gigabytes would only slow start-up.
CPU_KV_CACHE_BYTES = 64 << 20
# Requests one CPU batch runs at most; on cuda the plan sizes it from memory and context.
CPU_MAX_RUNNING_REQUESTS = 64
DTYPE = {"cuda": "bfloat16", "cpu": "float32"}
MODEL_DTYPES = ("float16", "bfloat16", "float32")  # the checkpoint dtypes `dtype` accepts
ATTENTION_BACKEND = {"cuda": "torch_native", "cpu": "torch_native"}
SPEC_DEFAULT_STEPS = 3
SPEC_DEFAULT_TOPK = 1


@attrs.frozen(slots=True)
class ResolveInputs:
    """What steps may consult besides the values: the device kind, the model's config and the cores this process may use."""

    device: str
    model: Mapping[str, Any] | None
    cpus: int = 1


def detect_device() -> str:
    """`cuda` when a CUDA device is usable, else `cpu`; avoids importing torch on machines with no GPU."""
    if "torch" not in sys.modules and not (os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/nvidia0")):
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_inputs(values: Mapping[str, Any], model: Mapping[str, Any] | None) -> ResolveInputs:
    """What the serving steps consult: the device kind (`auto` detected here), the model config and the usable cores."""
    device = values.get("device", "auto")
    return ResolveInputs(device=detect_device() if device == "auto" else device, model=model, cpus=usable_cpus())


def usable_cpus() -> int:
    """The cores this process may run on (its affinity mask, which a container's cpuset narrows), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity masks on this platform
        return max(1, os.cpu_count() or 1)


def read_model(record: Any, *, required: bool = False) -> Mapping[str, Any] | None:
    """The config.json a record names through model_path/model_config, or None when it cannot be read here."""
    path: str | None = getattr(record, "model_path", None)
    config: str | None = getattr(record, "model_config", None)
    if path is None:
        return None  # a copy of this schema without the model namespace
    try:
        return load_model_config(path, config)
    except ConfigError:
        if required or config is not None:
            raise
        return None  # a model_path we cannot read here (remote, not yet downloaded): no model facts


def _step_device(v: Values, env: ResolveInputs) -> dict[str, tuple[Any, str]]:
    if v["device"] == "auto":
        return {"device": (env.device, "cuda is available" if env.device == "cuda" else "no cuda device found")}
    return {}


def _step_cpu_threads(v: Values, env: ResolveInputs) -> dict[str, tuple[Any, str]]:
    if v["cpu_threads"] is not None:
        return {}
    replicas = max(1, v["dp_size"] // max(1, v["nnodes"]))  # the replicas this node runs, each a process
    threads = max(1, (env.cpus - 1) // replicas)
    return {
        "cpu_threads": (
            threads,
            f"{env.cpus} usable cores, one kept for the HTTP edge and the scheduler's Python, "
            f"shared by {replicas} replica(s) on this node",
        )
    }


def _step_dtype(v: Values, env: ResolveInputs) -> dict[str, tuple[Any, str]]:
    out = {}
    dtype = v["dtype"]
    if dtype == "auto":
        # A checkpoint's own dtype beats the device default: a bfloat16 model planned on a CPU
        # host should not be sized (or run) as float32.
        # (newer checkpoints write `dtype` where older ones wrote `torch_dtype`)
        declared = env.model.get("torch_dtype", env.model.get("dtype")) if env.model is not None else None
        if declared in MODEL_DTYPES:
            dtype, reason = declared, "model torch_dtype"
        else:
            dtype, reason = DTYPE[v["device"]], f"default for {v['device']}"
        out["dtype"] = (dtype, reason)
    if v["kv_cache_dtype"] == "auto":
        out["kv_cache_dtype"] = (dtype, "follows dtype")
    return out


def _step_context_length(v: Values, env: ResolveInputs) -> dict[str, tuple[Any, str]]:
    if v["context_length"] is None and env.model is not None:
        length = env.model.get("max_position_embeddings")
        if isinstance(length, int) and length > 0:
            return {"context_length": (length, "model max_position_embeddings")}
    return {}


def _step_schedule(v: Values, env: ResolveInputs) -> dict[str, tuple[Any, str]]:
    out: dict[str, tuple[Any, str]] = {}
    dev = v["device"]
    if v["page_size"] is None:
        out["page_size"] = (1, "default page size")
    if v["swa_full_tokens_ratio"] is None:
        out["swa_full_tokens_ratio"] = (0.8, "default SWA/full ratio")
    budget = v["kv_cache_memory_bytes"]
    if budget is None and dev == "cpu":
        budget = CPU_KV_CACHE_BYTES
        out["kv_cache_memory_bytes"] = (budget, "default for cpu: no device memory is measured there")
    elif budget is None:
        out["kv_cache_memory_bytes"] = (
            None,
            f"measured when the pools are planned: free {dev} memory times mem_fraction_static",
        )
    if v["mem_fraction_static"] is None:
        if budget is None:
            out["mem_fraction_static"] = (MEM_FRACTION_STATIC[dev], f"default for {dev}")
        else:
            out["mem_fraction_static"] = (None, "unused: kv_cache_memory_bytes is the KV budget")
    if v["max_running_requests"] is None and dev == "cpu":
        out["max_running_requests"] = (CPU_MAX_RUNNING_REQUESTS, "default for cpu")
    if v["chunked_prefill_size"] is None:
        out["chunked_prefill_size"] = (CHUNKED_PREFILL_SIZE[dev], f"default for {dev}")
    return out


def _step_attention_backend(v: Values, env: ResolveInputs) -> dict[str, tuple[Any, str]]:
    out = {}
    backend = v["attention_backend"]
    if backend is None:
        backend = ATTENTION_BACKEND[v["device"]]
        out["attention_backend"] = (backend, f"default for {v['device']}")
    return out


def _step_spec_defaults(v: Values, env: ResolveInputs) -> dict[str, tuple[Any, str]]:
    algo = v["speculative_algorithm"]
    if algo is None:
        return {}
    out: dict[str, tuple[Any, str]] = {}
    steps, topk, draft = v["speculative_num_steps"], v["speculative_eagle_topk"], v["speculative_num_draft_tokens"]
    if steps is None:
        steps = SPEC_DEFAULT_STEPS
        out["speculative_num_steps"] = (steps, f"default for {algo}")
    if topk is None:
        topk = SPEC_DEFAULT_TOPK
        out["speculative_eagle_topk"] = (topk, f"default for {algo}")
    if draft is None:
        draft = steps * topk + 1 if algo in TREE_DRAFT_ALGORITHMS else steps + 1
        out["speculative_num_draft_tokens"] = (
            draft,
            "steps * topk + 1" if algo in TREE_DRAFT_ALGORITHMS else "steps + 1",
        )
    if v["max_speculative_num_draft_tokens"] is None:
        out["max_speculative_num_draft_tokens"] = (draft, "capacity kept at publish = speculative_num_draft_tokens")
    return out


def _step_serving(v: Values, env: ResolveInputs) -> dict[str, tuple[Any, str]]:
    out = {}
    if v["served_model_name"] is None:
        out["served_model_name"] = (v["model_path"], "defaults to model_path")
    if v["random_seed"] is None:
        out["random_seed"] = (0, "default seed")
    if v["mamba_radix_cache_strategy"] == "auto":
        out["mamba_radix_cache_strategy"] = ("no_buffer", "default strategy")
    return out


STEPS: list[Step] = [
    Step("device", ("device",), _step_device),
    Step("cpu_threads", ("cpu_threads", "dp_size", "nnodes"), _step_cpu_threads),
    Step("dtype", ("device", "dtype", "kv_cache_dtype"), _step_dtype),
    Step("context_length", ("context_length",), _step_context_length),
    Step(
        "schedule_defaults",
        (
            "device",
            "page_size",
            "swa_full_tokens_ratio",
            "mem_fraction_static",
            "kv_cache_memory_bytes",
            "max_running_requests",
            "chunked_prefill_size",
        ),
        _step_schedule,
    ),
    Step("attention_backend", ("device", "attention_backend"), _step_attention_backend),
    Step(
        "spec_defaults",
        (
            "speculative_algorithm",
            "speculative_num_steps",
            "speculative_eagle_topk",
            "speculative_num_draft_tokens",
            "max_speculative_num_draft_tokens",
        ),
        _step_spec_defaults,
    ),
    Step(
        "serving_defaults",
        ("served_model_name", "model_path", "random_seed", "mamba_radix_cache_strategy"),
        _step_serving,
    ),
]
