"""Declarations: namespaces are frozen slotted bags, names are unique across them, and each field knows its namespace."""

from __future__ import annotations

import attrs
import pytest

from sgconf import DeclarationError, ExecConfig, KernelConfig, ServerArgs, namespace_of
from sgconf.fields import setting
from sgconf.serving import field_names, fields
from sgconf.serving.namespaces import SERVING

namespaces = SERVING.namespaces


def test_field_declared_twice_fails_naming_both_classes() -> None:
    """A second namespace declaring an existing field name fails at class creation, naming both owners."""
    schema = SERVING.copy("dup")
    before = (schema.field_names(), list(schema._namespaces))
    with pytest.raises(DeclarationError) as info:

        @schema.namespace("test_dup")
        class DupConfig:
            fresh_field: int = setting(1, help="fine on its own")
            page_size: int = setting(4, help="already declared in ScheduleConfig")

    assert str(info.value) == (
        "field 'page_size' is declared in both ScheduleConfig and DupConfig of schema 'dup' -- "
        "field names are routed flat and must be unique across namespaces"
    )
    assert isinstance(info.value, TypeError)
    assert (schema.field_names(), list(schema._namespaces)) == before  # nothing of the failed class was registered


def test_the_serving_schema_is_frozen() -> None:
    """Declaring into the built-in schema after import is refused: copy it instead."""
    with pytest.raises(DeclarationError, match="cannot declare namespace 'lora' in schema 'sgconf': it is frozen"):

        @SERVING.namespace("lora")
        class LoraConfig:
            max_loras: int = setting(4, help="adapters")

    assert "lora" not in namespaces() and "max_loras" not in field_names()


def test_undeclared_member_is_refused() -> None:
    """A field not declared with setting() is refused with the fix."""
    with pytest.raises(DeclarationError, match="field 'plain' of PlainConfig is not declared with setting"):

        @SERVING.copy("plain").namespace("test_plain")
        class PlainConfig:
            plain: int = 1


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("attention_backend", "exec.kernel"),
        ("cuda_graph_max_bs", "exec.graph"),
        ("page_size", "schedule"),
        ("api_key", "serving"),
        ("max_mamba_cache_size", "exec.mamba"),
    ],
)
def test_namespace_of(name: str, path: str) -> None:
    """namespace_of returns the dotted path of the declaring namespace."""
    assert namespace_of(name) == path


def test_bags_are_frozen_slotted_and_nest() -> None:
    """Every namespace class is a frozen, slotted attrs class; exec nests its sub-namespaces."""
    for cls in namespaces().values():
        assert attrs.has(cls) and "__slots__" in cls.__dict__, cls
    bag = ExecConfig()
    assert isinstance(bag.kernel, KernelConfig) and bag.kernel.attention_backend is None
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        bag.kernel.attention_backend = "x"  # type: ignore[misc]


def test_server_args_is_flat_frozen_and_complete() -> None:
    """ServerArgs holds every declared field flat, with the declared defaults, and cannot be assigned."""
    record = ServerArgs()
    assert [a.name for a in attrs.fields(ServerArgs)] == field_names()
    assert all(getattr(record, n) == info.default for n, info in fields().items())
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        record.page_size = 4
    with pytest.raises(ValueError, match="'page_size' must be a power of two"):
        ServerArgs(page_size=12)
