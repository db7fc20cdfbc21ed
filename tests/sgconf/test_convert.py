"""The one converter: typed values and env/CLI strings become each field's type, or a clear error."""

from __future__ import annotations

import dataclasses
import datetime
import enum
from typing import Any, Literal

import pytest

from sgconf.convert import ConversionError, _Plan, _to_bool, converter, describe_type, scalar_union, structure
from sgconf.fieldinfo import FieldInfo
from sgconf.fields import FieldSpec
from sgconf.frozen import FrozenDict
from sgconf.serving import field_info


def info_of(tp: Any) -> FieldInfo:
    return FieldInfo("x", "test", object, tp, None, FieldSpec(help="x"))


class Shade(enum.Enum):
    DARK = "dark"
    LIGHT = 2


class Mode(str, enum.Enum):  # an enum on a scalar base: its member, never the bare text
    EAGER = "eager"
    LAZY = "lazy"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclasses.dataclass(frozen=True)
class Window:
    size: int
    name: str = "w"

    def __post_init__(self) -> None:
        if self.size < 0:
            raise ValueError("size must be >= 0")


GOOD = [
    (int, "16", 16),
    (int, " 1_024 ", 1024),
    (int, 8.0, 8),
    (float, "0.5", 0.5),
    (float, 2, 2.0),
    (bool, "Yes", True),
    (bool, "off", False),
    (bool, 1, True),
    (bool, 0, False),
    (bool, True, True),
    (str, "abc", "abc"),
    (Literal["fcfs", "lpm"], "LPM", "lpm"),
    (int | None, "none", None),
    (int | None, "null", None),
    (int | None, None, None),
    (int | None, "3", 3),
    (Literal["file", "memory"] | None, "null", None),
    # lists and dicts come back deep-frozen: tuples and read-only FrozenDicts
    (list[int], "[1, 2]", (1, 2)),
    (list[int], "1, 2,3", (1, 2, 3)),
    (list[str], ["a", "b"], ("a", "b")),
    (dict[str, Any], '{"dir": "/d", "n": [1, {"k": null}]}', FrozenDict({"dir": "/d", "n": (1, {"k": None})})),
    (dict[str, Any] | None, {"a": 1.5}, FrozenDict({"a": 1.5})),
    (list[Any], ["a", [1]], ("a", (1,))),
    (tuple[int], "5", (5,)),
    (tuple[int, str], [1, "a"], (1, "a")),
    (datetime.timedelta, 90, datetime.timedelta(seconds=90)),
    (datetime.timedelta, "1m30s", datetime.timedelta(seconds=90)),
    (Shade, "LIGHT", Shade.LIGHT),
    (Shade, 2, Shade.LIGHT),
    (Mode, "lazy", Mode.LAZY),
    (Mode, "EAGER", Mode.EAGER),
    (Mode, Mode.LAZY, Mode.LAZY),
    (Level, 2, Level.HIGH),
    (Level, "low", Level.LOW),
    (list[Mode], "eager, lazy", (Mode.EAGER, Mode.LAZY)),
    (Mode | None, "lazy", Mode.LAZY),
    (Window, {"size": "3"}, Window(3)),
    (int | str, "7", "7"),  # an exact type match wins, as in pydantic's smart mode
    (int | float, "7", 7),
    (int | float, "7.5", 7.5),
]


@pytest.mark.parametrize(("tp", "raw", "expected"), GOOD, ids=[f"{t}-{r!r}" for t, r, _ in GOOD])
def test_structures_strings_and_typed_values(tp: Any, raw: Any, expected: Any) -> None:
    """Each raw value becomes exactly the expected typed value."""
    out = structure(raw, info_of(tp))
    assert out == expected and type(out) is type(expected)


BAD = [
    (int, "1.5", "expected an integer"),
    (int, True, "expected an integer, not a boolean"),
    (int, 2.5, "expected an integer"),
    (int, None, "expected an integer"),
    (float, "nan", "expected a finite number"),
    (float, False, "expected a number, not a boolean"),
    (float, 10**400, "expected a finite number (too large for a float)"),
    (bool, "maybe", "expected a boolean (true/false, 1/0, yes/no, on/off)"),
    (bool, 2, "expected a boolean (true/false, 1/0, yes/no, on/off)"),
    (str, 5, "expected a string"),
    (Literal["fcfs", "lpm"], "lifo", "expected one of 'fcfs', 'lpm'"),
    (list[int], "[1, ", "expected a JSON list (Expecting value)"),
    (list[int], "1, x", "item 1: expected an integer"),
    (list[int], 3, "expected a list"),
    (dict[str, Any], "[1]", "expected an object"),
    (dict[str, Any], '{"a": ', "expected a JSON object (Expecting value at char 6)"),
    (dict[str, Any], {1: "a"}, "expected a JSON object (key 1 is not a string)"),
    (dict[str, Any], {"a": {"b": {2: 0}}}, "expected a JSON object (key 2 in 'a.b' is not a string)"),
    (dict[str, Any], {"a": [1, {1, 2}]}, "expected a JSON object ('a[1]' is a set)"),
    (dict[str, Any], {"a": [1, float("nan")]}, "expected a JSON object ('a[1]' is nan, not a JSON number)"),
    (dict[str, Any], None, "expected a JSON object"),
    (tuple[int, str], [1], "expected 2 items, got 1"),
    (
        datetime.timedelta,
        float("inf"),
        (
            "expected a finite number of seconds -- or give a duration such as 30s, 1h30m, 250ms or PT1M30S"
            " (a bare number is seconds)"
        ),
    ),
    (Shade, "purple", "expected one of 'dark', 2"),
    (Mode, "sleepy", "expected one of 'eager', 'lazy'"),
    (Window, {"size": 1, "depth": 2}, "unknown key 'depth' -- Window takes size, name"),
    (Window, {"name": "n"}, "missing key 'size' -- Window needs size"),
    (Window, {"size": -1}, "expected an object of size, name (size must be >= 0)"),
    (int | float, "x", "expected an integer or a number"),
]


@pytest.mark.parametrize(("tp", "raw", "message"), BAD, ids=[f"{t}-{r!r}" for t, r, _ in BAD])
def test_bad_values_say_what_was_expected(tp: Any, raw: Any, message: str) -> None:
    """A value that does not fit raises ConversionError with the exact expectation."""
    with pytest.raises(ConversionError) as info:
        structure(raw, info_of(tp))
    assert str(info.value) == message


def test_declared_fields_use_the_same_converter() -> None:
    """A declared Optional[int] field takes 'none' and digits; a Literal field folds case."""
    assert structure("none", field_info("page_size")) is None
    assert structure("32", field_info("page_size")) == 32
    assert structure("eagle", field_info("speculative_algorithm")) == "EAGLE"


def test_a_huge_integer_for_a_float_field_is_a_collected_config_error() -> None:
    """An integer beyond the float range becomes one ConfigError line, never an OverflowError."""
    from sgconf import ConfigError, build_record

    with pytest.raises(ConfigError) as info:
        build_record({"schedule_conservativeness": 10**400, "page_size": 3}, {"schedule_conservativeness": "from --x"})
    assert [p.path for p in info.value.problems] == ["$.schedule.schedule_conservativeness", "$.schedule.page_size"]
    assert "expected a finite number (too large for a float)" in str(info.value)


def test_describe_type_names_enums_paths_and_record_classes() -> None:
    import pathlib

    assert describe_type(Shade) == "one of 'dark', 2"
    assert describe_type(pathlib.Path) == "a path"
    assert describe_type(Window) == "an object of size, name"
    assert describe_type(complex) == "<class 'complex'>"
    assert describe_type(Shade | None) == "one of 'dark', 2 or null"


class Opaque:
    """A type an adopter brings, with a hook on their own converter that raises plain ValueErrors."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Opaque) and other.text == self.text

    __hash__ = None  # type: ignore[assignment]


def _opaque(value: Any, _: Any) -> Opaque:
    if value == "bad":
        raise ValueError("not an opaque spelling")
    return Opaque(value)


def test_a_hook_on_the_schemas_converter_is_used_and_its_value_errors_become_conversion_errors() -> None:
    conv = converter.copy()
    conv.register_structure_hook(Opaque, _opaque)
    assert structure("ok", info_of(Opaque), conv) == Opaque("ok")
    assert structure(["a", "b"], info_of(list[Opaque]), conv) == (Opaque("a"), Opaque("b"))
    with pytest.raises(ConversionError) as top:
        structure("bad", info_of(Opaque), conv)
    assert str(top.value) == f"expected {Opaque} (not an opaque spelling)"
    with pytest.raises(ConversionError) as item:
        structure(["a", "bad"], info_of(list[Opaque]), conv)
    assert str(item.value) == f"item 1: expected {Opaque} (not an opaque spelling)"


def test_a_union_of_scalars_is_one_of_two_or_more_scalars() -> None:
    assert scalar_union(int | str | None) == (int, str)
    assert scalar_union(int | None) is None  # plain Optional: the member's own hook, not the union's
    assert scalar_union(int | list[int]) is None
    assert describe_type(Literal["a", "b"]) == "one of 'a', 'b'"
    assert describe_type(Literal["a"] | None) == "one of 'a' or null"


def test_a_field_structured_by_two_converters_uses_each_ones_hooks() -> None:
    """What a field's first conversion works out is kept per converter: another converter's hooks still apply."""
    info = info_of(int)
    shouting = converter.copy()
    shouting.register_structure_hook(int, lambda value, _: int(value) * 10)
    assert structure("3", info) == 3
    assert structure("3", info, shouting) == 30
    assert structure(3, info, shouting) == 30  # a value of the exact type still goes through the schema's hook
    assert structure("3", info) == 3
    assert structure(3, info) == 3
    assert structure(None, info_of(int | None)) is None
    with pytest.raises(ConversionError, match="expected an integer"):
        structure(None, info)


def test_only_values_our_own_hook_returns_unchanged_skip_conversion() -> None:
    """A plain int, bool or str of exactly the field's type is returned as it is; every other field type, a
    NaN-refusing float, a Literal and a schema's own hook always convert."""
    assert [_Plan(info_of(tp), converter).exact for tp in (int, bool, str, int | None)] == [int, bool, str, int]
    assert _Plan(info_of(float), converter).exact is None  # a float may be refused (NaN, infinities)
    assert _Plan(info_of(Literal["a", "b"]), converter).exact is None
    assert _Plan(info_of(list[int]), converter).exact is None
    own = converter.copy()
    own.register_structure_hook(int, lambda value, _: int(value))
    assert _Plan(info_of(int), own).exact is None
    assert _to_bool(True, bool) is True and _to_bool(False, bool) is False  # what the shortcut stands in for
