"""`sgconf.adopt` on every record kind a runtime may already have: dataclass, attrs, msgspec, pydantic."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import attrs
import msgspec
import pydantic
import pytest

import sgconf
from runtime import accessor, publish, reset
from sgconf import REQUIRED, ConfigError, DeclarationError, adopt
from sgconf.adopt import record_fields

# (name, type, default): an SGLang-shaped flat record, 44 fields; model_path has no default
FIELDS: list[tuple[str, Any, Any]] = [
    ("model_path", str, REQUIRED),
    ("tokenizer_path", "str | None", None),
    ("dtype", Literal["auto", "half", "bfloat16"], "auto"),
    ("kv_cache_dtype", str, "auto"),
    ("trust_remote_code", bool, False),
    ("context_length", "int | None", None),
    ("revision", "str | None", None),
    ("host", str, "127.0.0.1"),
    ("port", int, 30000),
    ("api_key", "str | None", None),
    ("served_model_name", "str | None", None),
    ("stream_interval", int, 1),
    ("tp_size", int, 1),
    ("pp_size", int, 1),
    ("dp_size", int, 1),
    ("ep_size", int, 1),
    ("nnodes", int, 1),
    ("node_rank", int, 0),
    ("dist_init_addr", "str | None", None),
    ("enable_dp_attention", bool, False),
    ("mem_fraction_static", "float | None", None),
    ("max_running_requests", "int | None", None),
    ("max_total_tokens", "int | None", None),
    ("chunked_prefill_size", "int | None", None),
    ("max_prefill_tokens", int, 16384),
    ("page_size", int, 1),
    ("schedule_policy", Literal["fcfs", "lpm"], "fcfs"),
    ("schedule_conservativeness", float, 1.0),
    ("disable_radix_cache", bool, False),
    ("enable_hierarchical_cache", bool, False),
    ("hicache_ratio", float, 2.0),
    ("hicache_size", int, 0),
    ("speculative_algorithm", "str | None", None),
    ("speculative_num_steps", "int | None", None),
    ("speculative_eagle_topk", "int | None", None),
    ("speculative_num_draft_tokens", "int | None", None),
    ("attention_backend", "str | None", None),
    ("sampling_backend", "str | None", None),
    ("enable_torch_compile", bool, False),
    ("cuda_graph_max_bs", "int | None", None),
    ("disable_cuda_graph", bool, False),
    ("log_level", str, "info"),
    ("log_requests", bool, False),
    ("lora_paths", "list[str]", ()),
]
NAMESPACES = {
    "model": [n for n, _, _ in FIELDS[:7]],
    "serving": [n for n, _, _ in FIELDS[7:12]],
    "parallel": [n for n, _, _ in FIELDS[12:20]],
    "schedule": [n for n, _, _ in FIELDS[20:29]],
    "memory": [n for n, _, _ in FIELDS[29:32]],
    "spec": [n for n, _, _ in FIELDS[32:36]],
}
PRIVATE = ("_bookkeeping", int, 0)


def _type(tp: Any) -> Any:
    return eval(tp) if isinstance(tp, str) else tp  # noqa: S307 - the table's own annotations


def _dataclass() -> type:
    spec = []
    for name, tp, default in [*FIELDS, PRIVATE]:
        if default is REQUIRED:
            spec.append((name, _type(tp)))
        elif isinstance(default, tuple):
            spec.append((name, _type(tp), dataclasses.field(default_factory=list)))
        else:
            spec.append((name, _type(tp), dataclasses.field(default=default, metadata={"help": f"the {name}"})))
    return dataclasses.make_dataclass("DataclassArgs", spec)


def _attrs() -> type:
    body = {}
    for name, tp, default in [*FIELDS, PRIVATE]:
        if default is REQUIRED:
            body[name] = attrs.field(type=_type(tp))
        elif isinstance(default, tuple):
            body[name] = attrs.field(type=_type(tp), factory=list)
        else:
            body[name] = attrs.field(type=_type(tp), default=default, metadata={"help": f"the {name}"})
    return attrs.make_class("AttrsArgs", body, frozen=True)


def _msgspec() -> type:
    spec = []
    for name, tp, default in FIELDS:
        if default is REQUIRED:
            spec.append((name, _type(tp)))
        elif isinstance(default, tuple):
            spec.append((name, _type(tp), msgspec.field(default_factory=list)))
        else:
            spec.append((name, _type(tp), default))
    spec.append(PRIVATE)
    return msgspec.defstruct("StructArgs", spec, kw_only=True)


def _pydantic() -> type:
    body: dict[str, Any] = {}
    for name, tp, default in [*FIELDS, PRIVATE]:
        if default is REQUIRED:
            body[name] = (_type(tp), ...)
        elif isinstance(default, tuple):
            body[name] = (_type(tp), pydantic.Field(default_factory=list))
        else:
            body[name] = (_type(tp), pydantic.Field(default=default, description=f"the {name}"))
    if PRIVATE[0].startswith("_"):
        body["bookkeeping_"] = body.pop(PRIVATE[0])  # pydantic keeps no underscored fields
    return pydantic.create_model("PydanticArgs", **body)


KINDS = {"dataclass": _dataclass, "attrs": _attrs, "msgspec": _msgspec, "pydantic": _pydantic}


@pytest.fixture(params=list(KINDS))
def record(request):
    return request.param, KINDS[request.param]()


def _adopt(cls: type) -> sgconf.Schema:
    private = [f.name for f in record_fields(cls)[1] if f.name in ("_bookkeeping", "bookkeeping_")]
    return adopt(
        cls, namespaces=NAMESPACES, others="exec", exclude=private, hot=["stream_interval"], secret=["api_key"]
    )


def test_each_kind_adopts_with_defaults_round_tripping(record):
    """44 fields in seven namespaces; every default and every instance value comes back equal."""
    kind, cls = record
    schema = _adopt(cls)
    assert schema.field_names() == [n for n, _, _ in FIELDS]
    assert schema.top_level_namespaces() == [*NAMESPACES, "exec"]
    instance = cls(model_path="/models/llama")
    built = schema.build(model_path="/models/llama")
    for name, _, default in FIELDS:
        if default is not REQUIRED:
            expected = list(default) if isinstance(default, tuple) else default
            assert schema.field_info(name).default == (() if isinstance(default, tuple) else default), name
            assert (
                list(getattr(instance, name)) == expected
                if isinstance(default, tuple)
                else getattr(instance, name) == expected
            )
        assert getattr(built, name) == getattr(schema.as_record(instance), name), name
    assert schema.field_info("stream_interval").setting.hot and schema.field_info("api_key").setting.secret
    if kind != "msgspec":
        assert schema.field_info("page_size").setting.help == "the page_size"


def test_an_instance_of_each_kind_publishes(record):
    """What the user's own loading built publishes as is, and accessors read it."""
    _, cls = record
    _adopt(cls)
    try:
        ctx = publish(cls(model_path="m", port=9000, lora_paths=["a"]), role="test")
        assert accessor("serving")().port == 9000
        assert ctx.snapshot().exec.lora_paths == ("a",)
    finally:
        reset()


def test_a_field_without_default_is_required_at_load(record):
    """Loading without the required field refuses, naming its flag and variable; with it, loading works."""
    kind, cls = record
    schema = _adopt(cls)
    with pytest.raises(ConfigError) as info:
        schema.load([], env={})
    prefix = cls.__name__.upper()
    assert str(info.value).splitlines()[-1].strip() == (
        f"$.model.model_path: 'model_path' is required and nothing set it -- pass --model-path, "
        f"set {prefix}_MODEL_PATH, or put it in a config file"
    )
    assert schema.load(["--model-path", "m"], env={}).record.model_path == "m"
    assert schema.load([], env={f"{prefix}_MODEL_PATH": "e"}).record.model_path == "e"
    assert (
        "required" in schema.json_schema()["properties"]["model"]
        and "default" not in schema.json_schema()["properties"]["model"]["properties"]["model_path"]
    )


def test_include_and_exclude_select_fields():
    """include= keeps only the listed fields; exclude= drops fields, private ones included."""
    cls = _dataclass()
    small = adopt(cls, namespaces={"model": ["model_path"]}, include=["model_path", "port", "tp_size"], others="rest")
    assert small.field_names() == ["model_path", "port", "tp_size"]
    publish(cls(model_path="m", port=1), role="test")
    try:
        assert accessor("rest")().port == 1
    finally:
        reset()


def test_errors_name_the_users_class_and_field():
    """A private field, an unknown name or a bad declaration names the user's record, never a generated class."""
    cls = _dataclass()
    with pytest.raises(
        DeclarationError,
        match=r"^field '_bookkeeping' of DataclassArgs is private, and settings are public names -- "
        r"leave it out with exclude=\['_bookkeeping'\]$",
    ):
        adopt(cls, namespaces=NAMESPACES, others="exec")
    with pytest.raises(
        DeclarationError,
        match="^exclude= names 'page_sise', which DataclassArgs does not have -- did you mean 'page_size'\\?$",
    ):
        adopt(cls, namespaces=NAMESPACES, others="exec", exclude=["page_sise"])
    with pytest.raises(
        DeclarationError, match="^namespace 'model' lists 'port' of DataclassArgs, which include=/exclude= leave out$"
    ):
        adopt(cls, namespaces={"model": ["port"]}, include=["model_path"], others="x")

    @dataclasses.dataclass
    class Clash:
        host: str = "h"
        config: str = "x"

    with pytest.raises(
        DeclarationError, match=r"^adopting dataclass Clash: flag '--config' of field 'config' must look like"
    ):
        adopt(Clash, namespaces={"a": ["host"], "b": ["config"]})

    with pytest.raises(
        DeclarationError,
        match="^adopt\\(\\) takes a dataclass, an attrs class, a msgspec Struct or a pydantic model, got <class 'int'>",
    ):
        adopt(int, namespaces={})
