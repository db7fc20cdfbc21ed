"""Each declared field type on each launch and run-time path: converted strictly, frozen, equal everywhere.

One row per type: the text a flag or variable gives, the value a config file gives, and
the value both must become. Each (type, path) cell is one case.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import math
import pathlib
import pickle
import typing
from pathlib import Path
from typing import Any, Literal, Optional, Union

import attrs
import pytest
import yaml

from runtime import publish, reset
from sgconf import ConfigError, DeclarationError, Schema, from_dataclass, setting
from sgconf.frozen import FrozenDict, thaw


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.Enum):
    LOW = 1
    HIGH = 2


@dataclasses.dataclass(frozen=True)
class Retry:
    tries: int = 3
    codes: tuple[int, ...] = (500,)


@attrs.frozen
class Pool:
    size: int
    name: str = "p"
    tags: list[str] = attrs.field(factory=list)


# name: (type, default, text for env/CLI, value in a TOML/JSON file, expected value once loaded)
TYPES: dict[str, tuple[Any, Any, str, Any, Any]] = {
    "int": (int, 1, "2", 2, 2),
    "float": (float, 1.0, "2.5", 2.5, 2.5),
    "str": (str, "a", "b", "b", "b"),
    "optional int": (Optional[int], None, "3", 3, 3),  # noqa: UP045
    "union of scalars": (Union[int, str], 1, "x", "x", "x"),  # noqa: UP007
    "literal": (Literal["a", "b"], "a", "b", "b", "b"),
    "enum": (Color, Color.RED, "blue", "blue", Color.BLUE),
    "enum of ints": (Level, Level.LOW, "high", 2, Level.HIGH),
    "duration": (datetime.timedelta, datetime.timedelta(seconds=30), "1m30s", "90s", datetime.timedelta(seconds=90)),
    "nonfinite float": (float, 1.0, "-inf", "-inf", -math.inf),
    "frozen dataclass": (Retry, Retry(), '{"tries": 5, "codes": [1]}', {"tries": 5}, None),
    "frozen attrs class": (Pool, Pool(1), '{"size": 2, "tags": ["a"]}', {"size": 2}, None),
    "path": (pathlib.Path, pathlib.Path("/a"), "/b", "/b", pathlib.Path("/b")),
    "fixed tuple": (tuple[int, str], (1, "a"), "2,b", [2, "b"], (2, "b")),
    "variadic tuple": (tuple[int, ...], (1,), "1,2", [1, 2], (1, 2)),
    "list of int": (list[int], [1], "1,2", [1, 2], (1, 2)),
    "set of str": (set[str], {"x"}, "x,y", ["x", "y"], frozenset({"x", "y"})),
    "frozenset of int": (frozenset[int], frozenset({1}), "1,2", [1, 2], frozenset({1, 2})),
    "dict of int": (dict[str, int], {"a": 1}, '{"a": 2}', {"a": 2}, {"a": 2}),
}
# name: (type, text that must be refused, words the problem names)
BAD: dict[str, tuple[Any, str, str]] = {
    "int": (int, "1.5", "expected an integer"),
    "union of scalars": (Union[int, float], "x", "expected an integer or a number"),  # noqa: UP007
    "fixed tuple": (tuple[int, str], "1,b,c", "expected 2 items, got 3"),
    "list of int": (list[int], "1,x", "item 1: expected an integer"),
    "set of int": (set[int], "1,x", "item 1: expected an integer"),
    "dict of int": (dict[str, int], '{"a": "x"}', "item 'a': expected an integer"),
}
# what the text of each record-typed row becomes (the file's value is the same object, or the part it gives)
FROM_TEXT = {"frozen dataclass": Retry(5, (1,)), "frozen attrs class": Pool(2, tags=("a",))}
FROM_FILE = {"frozen dataclass": Retry(5), "frozen attrs class": Pool(2, tags=())}
PATHS = ["default", "cli", "env", "toml", "json", "yaml", "instance", "override", "pickle", "resolved_dict"]


def schema_for(tp: Any, default: Any, name: str = "typed") -> Schema:
    schema = Schema(name, env_prefix="TYPED_")
    mutable = isinstance(default, (list, set, dict))
    options = {"nonfinite": True} if tp is float else {}
    field = (
        setting(factory=lambda: type(default)(default), help="x", hot=True)
        if mutable
        else setting(default, help="x", hot=True, **options)
    )
    schema.namespace("n")(type("N", (), {"__annotations__": {"f": tp}, "f": field}))
    globals()["SCHEMA"] = schema  # bound at module level, where its namespace is declared: its records pickle
    return schema.freeze()  # type: ignore[return-value]


@pytest.fixture(autouse=True)
def _clean():
    yield
    reset()


def _held(tp: Any, value: Any) -> Any:
    """`value` the way an adopter's own record would hold it: a list as a list, a set as a set."""
    origin = typing.get_origin(tp) or tp
    return origin(value) if origin in (list, set, dict) else value


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("kind", sorted(TYPES))
def test_a_supported_type_on_every_path(kind: str, path: str, tmp_path: Path) -> None:
    tp, default, text, typed, expected = TYPES[kind]
    from_text = FROM_TEXT.get(kind, expected)
    expected = FROM_FILE.get(kind, expected) if path in ("toml", "json", "yaml") else from_text
    schema = schema_for(tp, default)
    if path == "default":
        value = schema.record().f
        expected = schema.load([], env={}).record.f
        assert value == default or thaw(value) == thaw(default)
    elif path == "cli":
        value = schema.load(["--f=" + text], env={}).record.f
    elif path == "env":
        value = schema.load([], env={"TYPED_F": text}).record.f
    elif path in ("toml", "json", "yaml"):
        file = tmp_path / f"app.{path}"
        if path == "json":
            file.write_text(json.dumps({"n": {"f": typed}}), encoding="utf-8")
        elif path == "yaml":
            file.write_text(yaml.safe_dump({"n": {"f": typed}}), encoding="utf-8")
        else:
            rendered = json.dumps(typed)  # a TOML value of these kinds reads as its JSON spelling, but for tables
            body = (
                f"[n.f]\n{next(iter(typed))} = {typed[next(iter(typed))]}\n"
                if isinstance(typed, dict)
                else f"[n]\nf = {rendered}\n"
            )
            file.write_text(body, encoding="utf-8")
        value = schema.load(["--config", str(file)], env={}).record.f
    elif path == "instance":
        legacy = dataclasses.make_dataclass("Legacy", [("f", tp, dataclasses.field(default=None))])
        from_dataclass(legacy, namespaces={"n": ["f"]}, nonfinite=["f"] if tp is float else [])
        value = publish(legacy(f=_held(tp, from_text)), role="test").value("f")
    elif path == "override":
        ctx = publish(schema.record(), role="test")
        ctx.override("ops", f=text)
        value = ctx.value("f")
    elif path == "pickle":
        record = schema.load(["--f=" + text], env={}).record
        value = pickle.loads(pickle.dumps(record)).f
    else:
        ctx = publish(schema.load(["--f=" + text], env={}).record, role="test")
        value = ctx.value("f")
        shown = ctx.resolved_dict()["n"]["f"]
        assert shown == thaw(value)
        if isinstance(shown, (list, dict)):
            shown.clear()  # a copy: the context keeps its value
            assert ctx.value("f") == expected
    assert value == expected
    assert isinstance(value, type(expected))
    if isinstance(value, dict):
        assert isinstance(value, FrozenDict)
    assert not isinstance(value, (list, set, dict)) or isinstance(value, FrozenDict)
    for inner in (
        vars(value).values()
        if dataclasses.is_dataclass(value)
        else attrs.asdict(value, recurse=False).values()
        if attrs.has(type(value))
        else ()
    ):
        assert not isinstance(inner, (list, set, dict)) or isinstance(inner, FrozenDict)


@pytest.mark.parametrize("path", ["cli", "env", "override"])
@pytest.mark.parametrize("kind", sorted(BAD))
def test_a_bad_value_is_a_collected_problem_naming_the_field(kind: str, path: str) -> None:
    tp, text, words = BAD[kind]
    schema = Schema("badtyped", env_prefix="TYPED_")
    annotations = {"f": Optional[tp]}  # noqa: UP045
    schema.namespace("n")(type("N", (), {"__annotations__": annotations, "f": setting(None, help="x", hot=True)}))
    schema.freeze()
    with pytest.raises(ConfigError) as exc:
        if path == "cli":
            schema.load(["--f", text], env={})
        elif path == "env":
            schema.load([], env={"TYPED_F": text})
        else:
            publish(schema.record(), role="test").override("ops", f=text)
    (line,) = exc.value.lines()
    assert line.startswith("$.n.f: ") and words in line


@pytest.mark.parametrize("tp", [datetime.date, Union[int, list[int]], dict[int, int], list[complex]])  # noqa: UP007
def test_a_type_no_path_can_carry_is_refused_at_declaration(tp: Any) -> None:
    schema = Schema("refused", env_prefix="REFUSED_")
    schema.namespace("n")(type("N", (), {"__annotations__": {"f": tp}, "f": setting(None, help="x")}))
    with pytest.raises(DeclarationError, match="field 'f' has type .* which sgconf cannot carry"):
        schema.freeze()


def test_a_custom_type_with_a_hook_on_the_schema_converter_is_carried_in_lists_too() -> None:
    class Size(int):
        pass

    schema = Schema("sized", env_prefix="SIZED_")
    schema.namespace("n")(type("N", (), {"__annotations__": {"f": list[Size]}, "f": setting(factory=list, help="x")}))
    schema.converter.register_structure_hook(Size, lambda v, _: Size(int(str(v).rstrip("k")) * 1000))
    assert schema.load(["--f", "1k,2k"], env={}).record.f == (1000, 2000)


@pytest.mark.parametrize("form", ["toml", "json"])
@pytest.mark.parametrize("kind", sorted(TYPES))
def test_a_dump_of_each_type_loads_back_equal(kind: str, form: str, tmp_path: Path) -> None:
    """`show --format toml|json` output, given back as a config file, gives the same value."""
    from sgconf.dump import nested, to_toml

    tp, default, text, _typed, expected = TYPES[kind]
    expected = FROM_TEXT.get(kind, expected)
    schema = schema_for(tp, default)
    record = schema.load(["--f=" + text], env={}).record
    values = nested({"f": record.f}, schema=schema)
    file = tmp_path / f"dump.{form}"
    file.write_text(to_toml(values, schema=schema) if form == "toml" else json.dumps(values), encoding="utf-8")
    assert schema.load(["--config", str(file)], env={}).record.f == expected


def test_nones_inside_lists_and_nested_tables_survive_a_toml_dump(tmp_path: Path) -> None:
    from sgconf.dump import nested, to_toml

    schema = Schema("nones", env_prefix="NONES_")
    fields = {"f": setting(factory=list, help="x"), "g": setting(factory=dict, help="x")}
    schema.namespace("n")(
        type(
            "N",
            (),
            {
                "__annotations__": {"f": list[int | None], "g": dict[str, dict[str, int | None] | None]},
                **fields,
            },
        )
    )
    schema.freeze()
    source = tmp_path / "in.json"
    source.write_text(
        json.dumps({"n": {"f": [1, None, 2], "g": {"a": {"x": None, "y": 1}, "b": None}}}), encoding="utf-8"
    )
    record = schema.load(["--config", str(source)], env={}).record
    dump = tmp_path / "dump.toml"
    dump.write_text(to_toml(nested({"f": record.f, "g": record.g}, schema=schema), schema=schema), encoding="utf-8")
    again = schema.load(["--config", str(dump)], env={}).record
    assert again.f == (1, None, 2) and again.g == {"a": {"x": None, "y": 1}, "b": None}


@dataclasses.dataclass
class Mutable:
    x: int = 1


def test_a_mutable_record_type_is_refused_at_declaration_naming_the_way_to_freeze_it() -> None:
    schema = Schema("mutable", env_prefix="MUTABLE_")
    schema.namespace("n")(type("N", (), {"__annotations__": {"f": Mutable}, "f": setting(factory=Mutable, help="x")}))
    with pytest.raises(DeclarationError, match=r"field 'f' has type Mutable.* mutable class.*frozen=True"):
        schema.freeze()


def test_a_record_type_whose_field_cannot_be_carried_is_refused_naming_that_field() -> None:
    @dataclasses.dataclass(frozen=True)
    class Odd:
        when: datetime.date = datetime.date(2026, 1, 1)

    schema = Schema("odd", env_prefix="ODD_")
    schema.namespace("n")(type("N", (), {"__annotations__": {"f": Odd}, "f": setting(Odd(), help="x")}))
    with pytest.raises(DeclarationError, match=r"its field 'when': no conversion is registered for date"):
        schema.freeze()


@pytest.mark.parametrize("tp", [int, list[float], str])
def test_nonfinite_on_a_field_that_is_not_a_float_is_refused(tp: Any) -> None:
    schema = Schema("nf", env_prefix="NF_")
    schema.namespace("n")(type("N", (), {"__annotations__": {"f": tp}, "f": setting(None, help="x", nonfinite=True)}))
    with pytest.raises(DeclarationError, match="nonfinite applies to a float"):
        schema.freeze()


def test_a_float_refuses_infinities_and_nan_unless_it_declares_nonfinite() -> None:
    schema = schema_for(Optional[float], None)  # noqa: UP045 - an optional float: not the opted-in row
    for text in ("inf", "-inf", "nan", "1e999"):
        with pytest.raises(ConfigError, match=r"\$\.n\.f: expected a finite number"):
            schema.load(["--f=" + text], env={})
    assert math.isinf(schema_for(float, 1.0).load(["--f=inf"], env={}).record.f)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("1h30m", 5400), ("250ms", 0.25), ("PT1M30S", 90), ("P1DT2H", 93600), ("2.5", 2.5), ("-5s", -5)],
)
def test_every_duration_spelling_loads_and_dumps_to_one_that_loads_back_equal(text: str, seconds: float) -> None:
    from sgconf.durations import format_duration, parse_duration

    schema = schema_for(datetime.timedelta, datetime.timedelta(0))
    value = schema.load(["--f=" + text], env={}).record.f
    assert value == datetime.timedelta(seconds=seconds)
    assert parse_duration(format_duration(value)) == value


@pytest.mark.parametrize("text", ["5 parsecs", "1h30", "PT", "P", "h", "nan", "inf", "1e400"])
def test_a_bad_duration_is_a_problem_naming_the_spellings(text: str) -> None:
    schema = schema_for(datetime.timedelta, datetime.timedelta(0))
    with pytest.raises(ConfigError) as exc:
        schema.load(["--f=" + text], env={})
    (line,) = exc.value.lines()
    assert line.startswith("$.n.f: expected a duration such as 30s") or "finite number of seconds" in line


def _help_of(schema: Schema, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit):
        schema.load(["--help"], env={})
    return " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(
    ("kind", "shown"),
    [
        ("enum", "--f {red,blue} x (default: red)"),
        ("enum of ints", "--f {1,2} x (default: 1)"),
        ("path", "--f PATH x (default: /a)"),
        ("duration", "--f DURATION x (default: 30s) [hot]; DURATION is a duration such as 30s"),
        ("set of str", "--f LIST x"),
        ("fixed tuple", '--f LIST x (default: [1, "a"])'),
        ("frozen dataclass", '--f JSON x (default: {"tries": 3, "codes": [500]})'),
    ],
)
def test_help_shows_each_types_choices_and_format(kind: str, shown: str, capsys: pytest.CaptureFixture[str]) -> None:
    tp, default, *_ = TYPES[kind]
    assert shown in _help_of(schema_for(tp, default), capsys)


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("enum", {"enum": ["red", "blue"]}),
        ("enum of ints", {"enum": [1, 2]}),
        ("path", {"type": "string", "x-format": "a file system path"}),
        ("duration", {"type": ["string", "number"], "default": "30s"}),
        ("nonfinite float", {"type": ["number", "string"]}),
        ("union of scalars", {"type": ["integer", "string"]}),
        ("set of str", {"type": "array", "default": ["x"]}),
        ("frozen attrs class", {"type": "object", "default": {"size": 1, "name": "p", "tags": []}}),
    ],
)
def test_the_json_schema_shows_each_types_choices_and_format(kind: str, expected: dict[str, Any]) -> None:
    import jsonschema

    from sgconf.json_schema import config_schema

    tp, default, _text, typed, _ = TYPES[kind]
    schema = schema_for(tp, default)
    document = config_schema(schema)
    field = document["properties"]["n"]["properties"]["f"]
    assert {k: field[k] for k in expected} == expected
    jsonschema.validate({"n": {"f": typed}}, document)  # what a config file holds is valid against it
