"""`adopt` at its edges: unresolvable hints, unannotated attrs fields, duck-typed kinds, and each refusal."""

from __future__ import annotations

import dataclasses
import types
from typing import Any

import attrs
import pytest

from sgconf import DeclarationError, adopt, from_dataclass
from sgconf.adopt import record_fields


@dataclasses.dataclass
class _Pair:
    a: int = 1
    b: int = 2


def test_hints_that_do_not_resolve_fall_back_to_the_raw_annotations() -> None:
    @dataclasses.dataclass
    class Forward:
        x: NotDefinedAnywhere = 1  # type: ignore[name-defined]  # noqa: F821

    kind, fields = record_fields(Forward)
    assert kind == "dataclass" and fields[0].type == "NotDefinedAnywhere"


def test_an_unannotated_attrs_field_is_typed_any() -> None:
    @attrs.define
    class Bare:
        x = attrs.field(default=1)

    assert record_fields(Bare)[1][0].type is Any


def test_a_default_computed_from_the_instance_is_refused() -> None:
    @attrs.frozen
    class SelfRef:
        a: int = 1
        b: int = attrs.field(default=attrs.Factory(lambda self: self.a + 1, takes_self=True))

    with pytest.raises(DeclarationError) as info:
        record_fields(SelfRef)
    assert str(info.value) == (
        "field 'b' of SelfRef has a default computed from the instance -- give it a plain default, "
        "or leave it out with exclude="
    )


class _DuckField:
    """What a pydantic model's `model_fields` holds, for a field declared without an annotation."""

    annotation = None
    description = "the answer"
    default_factory = None
    default = 42

    def is_required(self) -> bool:
        return False


def test_a_pydantic_like_model_is_recognised_by_both_of_its_marks() -> None:
    model = type("Model", (), {"model_fields": {"answer": _DuckField()}, "model_validate": classmethod(lambda c, v: v)})
    kind, fields = record_fields(model)
    assert kind == "pydantic" and (fields[0].type, fields[0].help, fields[0].default) == (Any, "the answer", 42)
    for half in ({"model_fields": {}}, {"model_validate": classmethod(lambda c, v: v)}):
        with pytest.raises(DeclarationError, match="^adopt\\(\\) takes a dataclass"):
            record_fields(type("Half", (), half))


def test_a_field_listed_in_two_namespaces_is_refused() -> None:
    with pytest.raises(DeclarationError) as info:
        adopt(_Pair, namespaces={"x": ["a"], "y": ["a", "b"]})
    assert str(info.value) == "field 'a' of _Pair is listed in both 'x' and 'y'"


@pytest.mark.parametrize("mark", ["hot", "secret", "nonfinite"])
def test_a_mark_on_a_field_left_out_is_refused(mark: str) -> None:
    with pytest.raises(DeclarationError) as info:
        adopt(_Pair, namespaces={"x": ["a"]}, exclude=["b"], **{mark: ["b"]})
    assert str(info.value) == f"{mark}= names 'b' of _Pair, which include=/exclude= leave out"


def test_an_empty_namespace_is_left_out_and_the_schema_comes_back_frozen() -> None:
    schema = adopt(_Pair, namespaces={"empty": [], "x": ["a", "b"]})
    assert schema.frozen is True and list(schema.namespaces()) == ["x"]


def test_from_dataclass_takes_the_class_not_an_instance() -> None:
    with pytest.raises(DeclarationError, match="^from_dataclass\\(\\) takes a dataclass type, got _Pair\\(a=1, b=2\\)"):
        from_dataclass(_Pair(), namespaces={"x": ["a", "b"]})  # type: ignore[arg-type]
    with pytest.raises(DeclarationError, match="^from_dataclass\\(\\) takes a dataclass type"):
        from_dataclass(types.SimpleNamespace, namespaces={})  # type: ignore[arg-type]
