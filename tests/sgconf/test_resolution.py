"""Resolution: named steps, recorded decisions, once per record, failures stay failed."""

from __future__ import annotations

import pytest

from sgconf import Decision, ResolutionError, ServerArgs, load, resolve_once
from sgconf.serving.models import builtin_model_config, builtin_model_names


def test_decisions_are_named_steps_with_values() -> None:
    """Every None/auto on a default CPU record becomes a recorded decision of a named step."""
    resolved = resolve_once(load(env={}).record)
    steps = {d.field: d.step for d in resolved.decisions}
    assert steps == {
        "device": "device",
        "cpu_threads": "cpu_threads",
        "dtype": "dtype",
        "kv_cache_dtype": "dtype",
        "context_length": "context_length",
        "page_size": "schedule_defaults",
        "swa_full_tokens_ratio": "schedule_defaults",
        "mem_fraction_static": "schedule_defaults",
        "kv_cache_memory_bytes": "schedule_defaults",
        "max_running_requests": "schedule_defaults",
        "chunked_prefill_size": "schedule_defaults",
        "attention_backend": "attention_backend",
        "served_model_name": "serving_defaults",
        "random_seed": "serving_defaults",
        "mamba_radix_cache_strategy": "serving_defaults",
    }
    v = resolved.values
    assert (v.page_size, v.swa_full_tokens_ratio, v.chunked_prefill_size) == (1, 0.8, 2048)
    # a cpu measures no device memory: the KV budget is a size, and no fraction of anything applies
    assert (v.kv_cache_memory_bytes, v.mem_fraction_static, v.max_running_requests) == (64 << 20, None, 64)
    assert resolved.decision_for("mem_fraction_static").reason == "unused: kv_cache_memory_bytes is the KV budget"
    assert v.attention_backend == "torch_native"
    assert v.context_length == builtin_model_config("tiny")["max_position_embeddings"]
    assert resolved.decision_for("page_size") == Decision("schedule_defaults", "page_size", 1, "default page size")
    assert resolved.decision_for("page_size").source == "resolution:schedule_defaults"


def test_given_values_are_not_decided() -> None:
    """A value given at launch is kept and no decision is recorded for it."""
    resolved = resolve_once(load(["--page-size", "16", "--context-length", "512"], env={}).record)
    assert resolved.values.page_size == 16 and resolved.values.context_length == 512
    assert resolved.decision_for("page_size") is None and resolved.decision_for("context_length") is None


def test_speculative_defaults_and_capacity() -> None:
    """EAGLE defaults steps/topk, draft tokens = steps * topk + 1, and capacity = draft tokens."""
    resolved = resolve_once(load(["--speculative-algorithm", "EAGLE", "--speculative-eagle-topk", "2"], env={}).record)
    v = resolved.values
    assert (v.speculative_num_steps, v.speculative_eagle_topk, v.speculative_num_draft_tokens) == (3, 2, 7)
    assert v.max_speculative_num_draft_tokens == 7
    assert resolved.decision_for("max_speculative_num_draft_tokens").step == "spec_defaults"


def test_resolve_once_returns_the_same_result() -> None:
    """A second call on the same record returns the identical Resolved; an equal record resolves anew."""
    record = load(env={}).record
    first = resolve_once(record)
    assert resolve_once(record) is first
    other = ServerArgs()
    assert other == record and resolve_once(other) is not first
    assert resolve_once(other).values == first.values


def test_failed_resolution_cannot_be_retried() -> None:
    """A resolution that breaks a rule raises, and the same record refuses a second try."""
    record = load(["--speculative-algorithm", "EAGLE", "--max-speculative-num-draft-tokens", "2"], env={}).record
    with pytest.raises(ResolutionError) as first:
        resolve_once(record)
    assert first.value.lines() == [
        "$.spec.speculative_num_draft_tokens: --max-speculative-num-draft-tokens 2 is below "
        "--speculative-num-draft-tokens 4 -- the capacity pools are sized for must cover the draft tokens "
        "(from resolution:spec_defaults; from --max-speculative-num-draft-tokens)"
    ]
    with pytest.raises(ResolutionError, match="already failed -- fix the input and build a new ServerArgs"):
        resolve_once(record)


def test_model_shape_sets_context_length() -> None:
    """With an explicit model config, context_length comes from its max_position_embeddings."""
    resolved = resolve_once(ServerArgs(), model={"max_position_embeddings": 4096})
    assert resolved.values.context_length == 4096
    assert resolved.decision_for("context_length").reason == "model max_position_embeddings"


def test_missing_model_config_fails_naming_the_field(tmp_path) -> None:
    """An explicit model_config that does not exist fails resolution with the field and the fix."""
    missing = tmp_path / "config.json"
    with pytest.raises(ResolutionError) as info:
        resolve_once(ServerArgs(model_config=str(missing)))
    assert info.value.lines() == [
        f"$.model.model_config: no model config at '{missing}' -- pass the path of an HF-style config.json, "
        f"or a shipped model: {', '.join(builtin_model_names())}"
    ]


def test_unreadable_model_path_resolves_without_model_facts(tmp_path) -> None:
    """A model_path with no config here (not downloaded yet) leaves context_length undecided."""
    resolved = resolve_once(ServerArgs(model_path=str(tmp_path / "absent")))
    assert resolved.values.context_length is None and resolved.decision_for("context_length") is None


@pytest.mark.parametrize("field", ["model_path", "model_config"])
def test_shipped_model_names_resolve_from_either_field(field: str) -> None:
    """A shipped model's name works as model_path and as model_config, so show and serve accept it like plan."""
    resolved = resolve_once(ServerArgs(**{field: "llama-3.1-8b"}))
    assert resolved.values.context_length == 131072
    assert resolved.decision_for("context_length").reason == "model max_position_embeddings"


def test_mistyped_shipped_model_name_suggests_the_name() -> None:
    """A bare name that is neither a file nor a shipped model is refused with a did-you-mean."""
    from sgconf import ConfigError, load_model_config

    with pytest.raises(ConfigError) as info:
        load_model_config("tiny", "gemma-3-72b")
    assert info.value.lines()[0].startswith(
        "$.model.model_config: 'gemma-3-72b' is neither a file nor a shipped model -- did you mean 'gemma-3-27b'? -- "
        "pass the path of an HF-style config.json, or a shipped model: gemma-2-9b, gemma-3-27b,"
    )


def test_model_path_errors_name_the_fix(tmp_path) -> None:
    """load_model_config names model_path and the accepted forms when the directory has no config.json."""
    from sgconf import ConfigError, load_model_config

    with pytest.raises(ConfigError) as info:
        load_model_config(str(tmp_path))
    assert info.value.lines() == [
        f"$.model.model_path: no model config at '{tmp_path / 'config.json'}' -- "
        f"pass a directory holding config.json, or a shipped model: {', '.join(builtin_model_names())}"
    ]
    (tmp_path / "config.json").write_text("[1]")
    with pytest.raises(ConfigError, match="must be a JSON object"):
        load_model_config(str(tmp_path))


@pytest.mark.parametrize(
    ("model", "dtype", "reason"),
    [
        ({"torch_dtype": "bfloat16"}, "bfloat16", "model torch_dtype"),
        ({"torch_dtype": "float16"}, "float16", "model torch_dtype"),
        ({"torch_dtype": "int8"}, "float32", "default for cpu"),
        ({}, "float32", "default for cpu"),
    ],
)
def test_auto_dtype_follows_the_model(model: dict[str, str], dtype: str, reason: str) -> None:
    """dtype auto takes the model's torch_dtype when it is a supported one, else the device default; the KV cache follows."""
    resolved = resolve_once(ServerArgs(device="cpu"), model=model)
    assert resolved.decision_for("dtype") == Decision("dtype", "dtype", dtype, reason)
    assert resolved.values.kv_cache_dtype == dtype


def test_given_dtype_beats_the_model() -> None:
    """An explicit dtype is kept whatever the model declares."""
    resolved = resolve_once(ServerArgs(dtype="float32"), model={"torch_dtype": "bfloat16"})
    assert resolved.values.dtype == "float32" and resolved.decision_for("dtype") is None


def test_a_resolved_record_refuses_another_model_and_keeps_no_reference() -> None:
    """Resolving again with a different model is refused; the model given first is copied, not kept."""
    from sgconf import ConfigError

    model = {"max_position_embeddings": 100, "nested": {"k": [1]}}
    record = ServerArgs()
    first = resolve_once(record, model)
    model["nested"]["k"].append(2)
    assert first.model == {"max_position_embeddings": 100, "nested": {"k": [1]}}
    assert resolve_once(record, {"max_position_embeddings": 100, "nested": {"k": [1]}}) is first
    with pytest.raises(ConfigError) as info:
        resolve_once(record, {"max_position_embeddings": 200})
    assert str(info.value) == (
        "cannot resolve against a different model\n"
        "  $model: this record was already resolved with another model, and a record resolves once "
        "-- build a new record for this model (attrs.evolve(record) copies it unresolved)"
    )


def test_on_cuda_the_budget_is_measured_and_the_fraction_applies() -> None:
    """On cuda the budget is left to the planner's measurement, recorded as such, and mem_fraction_static is decided."""
    resolved = resolve_once(load(["--device", "cuda"], env={}).record)
    assert (resolved.values.kv_cache_memory_bytes, resolved.values.mem_fraction_static) == (None, 0.88)
    assert resolved.decision_for("kv_cache_memory_bytes").reason == (
        "measured when the pools are planned: free cuda memory times mem_fraction_static"
    )
    assert resolved.values.max_running_requests is None  # sized by the plan from memory and context
    given = resolve_once(load(["--device", "cuda", "--kv-cache-memory-bytes", "1000000"], env={}).record)
    assert (given.values.kv_cache_memory_bytes, given.values.mem_fraction_static) == (1_000_000, None)


def test_cpu_threads_leave_a_core_for_the_edge_and_share_the_rest_between_a_nodes_replicas() -> None:
    from sgconf.serving.steps import ResolveInputs, _step_cpu_threads

    def threads(cpus: int, dp_size: int = 1, nnodes: int = 1, given: int | None = None) -> int | None:
        v = {"cpu_threads": given, "dp_size": dp_size, "nnodes": nnodes}
        out = _step_cpu_threads(v, ResolveInputs(device="cpu", model=None, cpus=cpus))
        return out["cpu_threads"][0] if out else given

    assert [threads(8), threads(8, dp_size=2), threads(8, dp_size=4, nnodes=2), threads(2), threads(1)] == [
        7,
        3,
        3,
        1,
        1,
    ]
    assert threads(8, given=8) == 8  # a value set at launch is kept
    decided = resolve_once(load(["--dp-size", "2"], env={}).record).decision_for("cpu_threads")
    assert decided is not None and "replica(s) on this node" in decided.reason
