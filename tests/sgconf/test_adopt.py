"""`sgconf.from_dataclass`: adopt an existing dataclass record, publish its instances, and ratchet its readers."""

from __future__ import annotations

import dataclasses
import sys
import textwrap
from pathlib import Path
from typing import Literal

import pytest

from runtime import accessor, get_context, override_server_args, publish
from sgconf import DeclarationError, from_dataclass, resolve_once, schema_of


@dataclasses.dataclass
class LegacyArgs:
    """A vLLM/SGLang-style flat record: 40 fields, several named like serving-schema fields."""

    model: str = dataclasses.field(default="facebook/opt-125m", metadata={"help": "model name or path"})
    tokenizer: str | None = None
    dtype: Literal["auto", "half", "bfloat16"] = "half"
    seed: int = 0
    host: str = dataclasses.field(default="0.0.0.0", metadata={"help": "bind address"})
    port: int = 8080
    api_key: str | None = None
    page_size: int = 32
    max_loras: int = dataclasses.field(default=1, metadata={"help": "adapters resident at once"})
    max_lora_rank: int = 16
    lora_dtype: str = "auto"
    enable_lora: bool = False
    lora_modules: list[str] = dataclasses.field(default_factory=list)
    gpu_memory_utilization: float = 0.9
    swap_space: int = 4
    cpu_offload_gb: float = 0.0
    block_size: int = 16
    num_gpu_blocks_override: int | None = None
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    distributed_executor_backend: str | None = None
    disable_custom_all_reduce: bool = False
    enforce_eager: bool = False
    max_seq_len_to_capture: int = 8192
    quantization: str | None = None
    kv_cache_dtype: str = "auto"
    trust_remote_code: bool = False
    revision: str | None = None
    download_dir: str | None = None
    served_model_name: str | None = None
    uvicorn_log_level: str = "info"
    disable_log_requests: bool = False
    override_generation_config: dict[str, float] = dataclasses.field(default_factory=dict)


NAMESPACES = {
    "model": ["model", "tokenizer", "dtype", "seed", "revision", "download_dir", "trust_remote_code", "quantization"],
    "api": ["host", "port", "api_key", "served_model_name", "uvicorn_log_level", "disable_log_requests"],
    "lora": ["max_loras", "max_lora_rank", "lora_dtype", "enable_lora", "lora_modules"],
    "cache": [
        "page_size",
        "block_size",
        "gpu_memory_utilization",
        "swap_space",
        "cpu_offload_gb",
        "kv_cache_dtype",
        "num_gpu_blocks_override",
        "enable_prefix_caching",
    ],
    "parallel": [
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "data_parallel_size",
        "distributed_executor_backend",
        "disable_custom_all_reduce",
    ],
}


@pytest.fixture(scope="module")
def legacy():
    return from_dataclass(
        LegacyArgs,
        namespaces=NAMESPACES,
        others="scheduler",
        hot=["max_loras"],
        secret=["api_key"],
        env_prefix="LEGACY_",
    )


def test_keeps_the_adopters_types_defaults_and_help(legacy) -> None:
    """Clashing names keep the dataclass's types and defaults; unmapped fields go to `others`."""
    assert len(legacy.fields()) == 40
    assert legacy.field_info("port").default == 8080 and legacy.field_info("host").setting.help == "bind address"
    assert legacy.field_info("dtype").choices == ("auto", "half", "bfloat16")
    assert legacy.field_info("page_size").namespace == "cache" and legacy.field_info("page_size").default == 32
    assert legacy.namespace_of("max_num_seqs") == "scheduler"
    assert legacy.field_info("max_loras").setting.hot and legacy.field_info("api_key").setting.secret
    assert legacy.top_level_namespaces() == ["model", "api", "lora", "cache", "parallel", "scheduler"]


def test_publishing_an_instance_gives_the_bags_of_a_loaded_record(legacy) -> None:
    """An instance built by the adopter's own argparse publishes the same bags as schema.load of the same flags."""
    instance = LegacyArgs(port=9000, max_loras=4, lora_modules=["a"], override_generation_config={"temperature": 0.5})
    loaded = legacy.load(
        [
            "--port",
            "9000",
            "--max-loras",
            "4",
            "--lora-modules",
            "a",
            "--override-generation-config",
            '{"temperature": 0.5}',
        ],
        env={},
    ).record
    get_lora = accessor(legacy.namespace_class("lora"))
    with override_server_args(schema=legacy):
        ctx = publish(instance, role="test")
        assert schema_of(ctx.record) is legacy
        assert ctx.snapshot().bags() == resolve_once(loaded).bags()
        assert get_lora().lora_modules == ("a",) and get_lora().max_loras == 4
        ctx.override("autoscaler", max_loras=2)
        assert get_lora().max_loras == 2 and instance.max_loras == 4
        assert ctx.explain("port")[-1].describe() == "from record:LegacyArgs instance"
        assert get_context().resolved_dict()["api"]["api_key"] is None


def test_a_bad_instance_value_is_a_config_error(legacy) -> None:
    """A value the adopter's argparse let through that does not fit the type is refused, naming field and source."""
    from sgconf import ConfigError

    with pytest.raises(ConfigError) as info:
        publish(LegacyArgs(port="http"), role="test")  # type: ignore[arg-type]
    assert info.value.lines() == ["$.api.port: expected an integer, got 'http' (from LegacyArgs instance)"]


def test_declaration_errors_name_the_field() -> None:
    """Unlisted fields without `others`, unknown names and missing defaults are refused with the fix."""

    @dataclasses.dataclass
    class Small:
        a: int = 1
        b: int = 2

    with pytest.raises(DeclarationError, match="fields of Small not in any namespace: b -- list them, or pass others="):
        from_dataclass(Small, namespaces={"x": ["a"]})
    with pytest.raises(DeclarationError, match="namespace 'x' lists 'c', which Small does not have"):
        from_dataclass(Small, namespaces={"x": ["a", "b", "c"]})

    with pytest.raises(
        DeclarationError, match="from_dataclass\\(\\) takes a dataclass type, got 3 -- use sgconf.adopt\\(\\)"
    ):
        from_dataclass(3, namespaces={})  # type: ignore[arg-type]


def test_the_ratchet_counts_raw_reads_with_the_schema_as_field_source(tmp_path: Path, monkeypatch, capsys) -> None:
    """`field_source` pointing at the adopted schema makes the ratchet count raw reads of its fields."""
    from tools.ratchet.cli import main as ratchet

    (tmp_path / "legacy_schema.py").write_text(
        textwrap.dedent(
            """
        import dataclasses
        import sgconf

        @dataclasses.dataclass
        class ServerArgs:
            max_loras: int = 1
            port: int = 8080

        SCHEMA = sgconf.from_dataclass(ServerArgs, namespaces={"lora": ["max_loras"], "api": ["port"]})
        """
        )
    )
    (tmp_path / "worker.py").write_text(
        "def start(server_args):\n    return server_args.max_loras + server_args.port\n"
    )
    (tmp_path / "ratchet.toml").write_text(
        textwrap.dedent(
            """
        [config]
        field_source = "legacy_schema:SCHEMA.field_names"
        accessor_source = "legacy_schema:SCHEMA.accessor_of"
        include = ["worker.py"]
        """
        )
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert ratchet(["check", "--no-cache", "-j", "1"]) == 1
    out = capsys.readouterr().out
    assert "max_loras" in out and "get_lora().max_loras" in out and "get_api().port" in out
