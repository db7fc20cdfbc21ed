"""Resolution: turn every `None`/`"auto"` into a named, recorded decision, once per record.

Steps are small callables in a plain list (`STEPS`), run in order over a working copy
of the values. Each returns the decisions it took; each decision becomes provenance
`resolution:<step>`. A record is resolved at most once: a second call returns the same
`Resolved`, and a record whose resolution failed stays failed (build a new record).
"""

from __future__ import annotations

import copy
import os
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from sgconf.errors import ConfigError, Problem, ResolutionError
from sgconf.loading import provenance_of
from sgconf.record import ServerArgs, record_to_dict, to_bags
from sgconf.rules import TREE_DRAFT_ALGORITHMS, check_rules

# Defaults by device kind, chosen to leave room for activations and graphs on GPU.
MEM_FRACTION_STATIC = {"cuda": 0.88, "cpu": 0.8}
CHUNKED_PREFILL_SIZE = {"cuda": 8192, "cpu": 2048}
DTYPE = {"cuda": "bfloat16", "cpu": "float32"}
MODEL_DTYPES = ("float16", "bfloat16", "float32")  # the checkpoint dtypes `dtype` accepts
ATTENTION_BACKEND = {"cuda": "torch_native", "cpu": "torch_native"}
SPEC_DEFAULT_STEPS = 3
SPEC_DEFAULT_TOPK = 1


@attrs.frozen(slots=True)
class Decision:
    """One value resolution chose: which step, which field, what value, and why."""

    step: str
    field: str
    value: Any
    reason: str

    @property
    def source(self) -> str:
        return f"resolution:{self.step}"


@attrs.frozen(slots=True)
class Resolved:
    """A record and what resolution made of it; `values` is a ServerArgs with no `auto` left."""

    record: Any
    values: Any
    decisions: tuple[Decision, ...]
    model: Mapping[str, Any] | None = None

    def bags(self) -> dict[str, Any]:
        return to_bags(self.values)

    def decision_for(self, field: str) -> Decision | None:
        for d in self.decisions:
            if d.field == field:
                return d
        return None


@attrs.frozen(slots=True)
class ResolveInputs:
    """What steps may consult besides the values: the device kind and the model's config."""

    device: str
    model: Mapping[str, Any] | None


Step = Callable[[dict[str, Any], ResolveInputs], dict[str, tuple[Any, str]]]


def _step_device(v: dict[str, Any], env: ResolveInputs) -> dict[str, tuple[Any, str]]:
    if v["device"] == "auto":
        return {"device": (env.device, "cuda is available" if env.device == "cuda" else "no cuda device found")}
    return {}


def _step_dtype(v: dict[str, Any], env: ResolveInputs) -> dict[str, tuple[Any, str]]:
    out = {}
    dtype = v["dtype"]
    if dtype == "auto":
        # A checkpoint's own dtype beats the device default: a bfloat16 model planned on a CPU
        # host should not be sized (or run) as float32.
        declared = env.model.get("torch_dtype") if env.model is not None else None
        if declared in MODEL_DTYPES:
            dtype, reason = declared, "model torch_dtype"
        else:
            dtype, reason = DTYPE[v["device"]], f"default for {v['device']}"
        out["dtype"] = (dtype, reason)
    if v["kv_cache_dtype"] == "auto":
        out["kv_cache_dtype"] = (dtype, "follows dtype")
    return out


def _step_context_length(v: dict[str, Any], env: ResolveInputs) -> dict[str, tuple[Any, str]]:
    if v["context_length"] is None and env.model is not None:
        length = env.model.get("max_position_embeddings")
        if isinstance(length, int) and length > 0:
            return {"context_length": (length, "model max_position_embeddings")}
    return {}


def _step_schedule(v: dict[str, Any], env: ResolveInputs) -> dict[str, tuple[Any, str]]:
    out: dict[str, tuple[Any, str]] = {}
    dev = v["device"]
    if v["page_size"] is None:
        out["page_size"] = (1, "default page size")
    if v["swa_full_tokens_ratio"] is None:
        out["swa_full_tokens_ratio"] = (0.8, "default SWA/full ratio")
    if v["mem_fraction_static"] is None:
        out["mem_fraction_static"] = (MEM_FRACTION_STATIC[dev], f"default for {dev}")
    if v["chunked_prefill_size"] is None:
        out["chunked_prefill_size"] = (CHUNKED_PREFILL_SIZE[dev], f"default for {dev}")
    return out


def _step_attention_backend(v: dict[str, Any], env: ResolveInputs) -> dict[str, tuple[Any, str]]:
    out = {}
    backend = v["attention_backend"]
    if backend is None:
        backend = ATTENTION_BACKEND[v["device"]]
        out["attention_backend"] = (backend, f"default for {v['device']}")
    if v["sampling_backend"] is None:
        out["sampling_backend"] = ("pytorch", "default sampler")
    return out


def _step_spec_defaults(v: dict[str, Any], env: ResolveInputs) -> dict[str, tuple[Any, str]]:
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
        out["speculative_num_draft_tokens"] = (draft, "steps * topk + 1" if algo in TREE_DRAFT_ALGORITHMS else "steps + 1")
    if v["max_speculative_num_draft_tokens"] is None:
        out["max_speculative_num_draft_tokens"] = (draft, "capacity kept at publish = speculative_num_draft_tokens")
    return out


def _step_serving(v: dict[str, Any], env: ResolveInputs) -> dict[str, tuple[Any, str]]:
    out = {}
    if v["served_model_name"] is None:
        out["served_model_name"] = (v["model_path"], "defaults to model_path")
    if v["random_seed"] is None:
        out["random_seed"] = (0, "default seed")
    if v["mamba_radix_cache_strategy"] == "auto":
        out["mamba_radix_cache_strategy"] = ("no_buffer", "default strategy")
    return out


STEPS: list[tuple[str, Step]] = [
    ("device", _step_device),
    ("dtype", _step_dtype),
    ("context_length", _step_context_length),
    ("schedule_defaults", _step_schedule),
    ("attention_backend", _step_attention_backend),
    ("spec_defaults", _step_spec_defaults),
    ("serving_defaults", _step_serving),
]


def detect_device() -> str:
    """`cuda` when a CUDA device is usable, else `cpu`; avoids importing torch on machines with no GPU."""
    if "torch" not in sys.modules and not (os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/nvidia0")):
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


# Serializes first resolutions, so two threads resolving one record get one result.
_lock = threading.Lock()


def resolve_once(record: Any, model: Mapping[str, Any] | Any | None = None) -> Resolved:
    """Resolve `record` (a ServerArgs) once; later calls return the same `Resolved`.

    `model` is an HF-style config dict (or an object with `to_config()`/`config`); when
    None, the config named by model_path/model_config is read if it exists.
    Raises ResolutionError when the resolved values break a rule; the failure is
    remembered so the same record cannot be resolved again. Raises ConfigError when the
    record was already resolved and `model` differs from the model used then.
    """
    if not isinstance(record, ServerArgs):
        raise TypeError(f"resolve_once() takes a ServerArgs, got {type(record).__name__}")
    with _lock:
        result = getattr(record, "_sgconf_resolution", None)
        if isinstance(result, ResolutionError):
            msg = "resolution of this record already failed -- fix the input and build a new ServerArgs"
            raise ResolutionError(list(result.problems), header=msg)
        if result is not None:
            if model is not None and _model_config(record, model) != result.model:
                msg = (
                    "this record was already resolved with another model, and a record resolves once "
                    "-- build a new record for this model (attrs.evolve(record) copies it unresolved)"
                )
                raise ConfigError([Problem("$model", msg)], header="cannot resolve against a different model")
            return result
        try:
            result = _resolve(record, _model_config(record, model))
        except ConfigError as exc:
            failure = ResolutionError(list(exc.problems), header="resolution failed")
            object.__setattr__(record, "_sgconf_resolution", failure)
            raise failure from None
        object.__setattr__(record, "_sgconf_resolution", result)
        return result


def _model_config(record: Any, model: Any) -> Mapping[str, Any] | None:
    if model is None:
        from sgconf.models import load_model_config

        try:
            return load_model_config(record.model_path, record.model_config)
        except ConfigError:
            if record.model_config is not None:
                raise
            return None  # a model_path we cannot read here (remote, not yet downloaded): no model facts
    if isinstance(model, Mapping):
        return copy.deepcopy(model)  # a private copy: the caller may go on changing theirs
    for attr in ("to_config", "config"):
        found = getattr(model, attr, None)
        if callable(found):
            found = found()
        if isinstance(found, Mapping):
            return copy.deepcopy(found)
    raise TypeError(f"model must be a config mapping, got {type(model).__name__}")


def _sources(record: Any, decisions: list[Decision]) -> dict[str, str]:
    """Where each value resolution judged came from: its launch layer, or the step that decided it."""
    launch = provenance_of(record) or {}
    out = {name: chain[-1].describe() for name, chain in launch.items() if chain[-1].layer != "default"}
    out.update((d.field, f"from {d.source}") for d in decisions)
    return out


def _resolve(record: Any, model: Mapping[str, Any] | None) -> Resolved:
    values = record_to_dict(record)
    device = detect_device() if values["device"] == "auto" else values["device"]
    env = ResolveInputs(device=device, model=model)
    decisions: list[Decision] = []
    for name, step in STEPS:
        for field, (value, reason) in step(values, env).items():
            values[field] = value
            decisions.append(Decision(name, field, value, reason))
    problems = check_rules(values, _sources(record, decisions))
    if problems:
        raise ConfigError(problems)
    try:
        resolved = ServerArgs(**values)
    except ValueError as exc:  # a decision broke a field check: a bug in a step, report it as such
        raise ConfigError([Problem("$", f"resolution produced an invalid value: {exc}")]) from None
    return Resolved(record=record, values=resolved, decisions=tuple(decisions), model=model)
