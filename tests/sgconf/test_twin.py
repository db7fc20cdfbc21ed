"""Frozen instances built and copied through a mutable twin: exactly the class's instances, frozen, every field kept."""

from __future__ import annotations

import pickle

import attrs
import pytest

from sgconf.twin import builder, replaced


@attrs.frozen(slots=True)
class Named:
    # field names the generated functions use for themselves, with and without their suffix
    new: int
    cls: str
    obj_: tuple[int, ...]
    changes: int = 0
    inst_: int = attrs.field(default=0, kw_only=True)


def test_a_built_instance_equals_the_constructed_one_whatever_its_field_names() -> None:
    built = builder(Named)(1, "a", (2,), 3, 4)
    assert built == Named(1, "a", (2,), 3, inst_=4) and type(built) is Named
    assert replaced(built, {"cls": "b", "obj_": ()}) == Named(1, "b", (), 3, inst_=4)
    assert built == Named(1, "a", (2,), 3, inst_=4)  # the original is untouched


def test_a_built_or_copied_instance_is_frozen_and_behaves_like_the_class() -> None:
    made = [builder(Named)(1, "a", (), 0, 0), replaced(Named(1, "a", ()), {"new": 2})]
    for obj in made:
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            obj.new = 5  # type: ignore[misc]
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            del obj.new  # type: ignore[misc]
        assert type(obj) is Named and pickle.loads(pickle.dumps(obj)) == obj and hash(obj) == hash(attrs.evolve(obj))


def test_a_subclass_gets_its_own_builder_and_copier() -> None:
    @attrs.frozen(slots=True)
    class Wider(Named):
        extra: float = 1.0

    wide = builder(Wider)(1, "a", (), 0, 0, 2.5)
    assert type(wide) is Wider and wide.extra == 2.5
    base = builder(Named)(1, "a", (), 0, 0)
    assert type(base) is Named and type(replaced(wide, {"extra": 3.0})) is Wider


def test_each_class_gets_one_twin_and_one_generated_function_of_each_kind() -> None:
    @attrs.frozen(slots=True)
    class Once:
        a: int

    made = builder(Once)
    assert builder(Once) is made  # generated once, kept on the class
    replaced(made(1), {"a": 2})
    replaced(made(1), {})
    assert len(Once.__subclasses__()) == 1  # the builder and the copier share one twin
