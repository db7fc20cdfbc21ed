"""Each declared field type on each launch and run-time path: converted strictly, frozen, equal everywhere.

One row per type: the text a flag or variable gives, the value a config file gives, and
the value both must become. Each (type, path) cell is one case.
"""

from __future__ import annotations

import datetime
import enum
import json
import pathlib
import pickle
from pathlib import Path
from typing import Any, Literal, Optional, Union

import pytest

from runtime import publish, reset
from sgconf import ConfigError, DeclarationError, Schema, setting
from sgconf.frozen import FrozenDict, thaw


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


# name: (type, default, text for env/CLI, value in a TOML/JSON file, expected value once loaded)
TYPES: dict[str, tuple[Any, Any, str, Any, Any]] = {
    "int": (int, 1, "2", 2, 2),
    "float": (float, 1.0, "2.5", 2.5, 2.5),
    "str": (str, "a", "b", "b", "b"),
    "optional int": (Optional[int], None, "3", 3, 3),  # noqa: UP045
    "union of scalars": (Union[int, str], 1, "x", "x", "x"),  # noqa: UP007
    "literal": (Literal["a", "b"], "a", "b", "b", "b"),
    "enum": (Color, Color.RED, "blue", "blue", Color.BLUE),
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
PATHS = ["default", "cli", "env", "toml", "json", "override", "pickle", "resolved_dict"]


def schema_for(tp: Any, default: Any, name: str = "typed") -> Schema:
    schema = Schema(name, env_prefix="TYPED_")
    mutable = isinstance(default, (list, set, dict))
    field = (
        setting(factory=lambda: type(default)(default), help="x", hot=True)
        if mutable
        else setting(default, help="x", hot=True)
    )
    schema.namespace("n")(type("N", (), {"__annotations__": {"f": tp}, "f": field}))
    globals()["SCHEMA"] = schema  # bound at module level, where its namespace is declared: its records pickle
    return schema.freeze()  # type: ignore[return-value]


@pytest.fixture(autouse=True)
def _clean():
    yield
    reset()


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("kind", sorted(TYPES))
def test_a_supported_type_on_every_path(kind: str, path: str, tmp_path: Path) -> None:
    tp, default, text, typed, expected = TYPES[kind]
    schema = schema_for(tp, default)
    if path == "default":
        value = schema.record().f
        expected = schema.load([], env={}).record.f
    elif path == "cli":
        value = schema.load(["--f", text], env={}).record.f
    elif path == "env":
        value = schema.load([], env={"TYPED_F": text}).record.f
    elif path in ("toml", "json"):
        file = tmp_path / f"app.{path}"
        if path == "json":
            file.write_text(json.dumps({"n": {"f": typed}}), encoding="utf-8")
        else:
            rendered = json.dumps(typed)  # a TOML value of these kinds reads as its JSON spelling, but for tables
            body = (
                f"[n.f]\n{next(iter(typed))} = {typed[next(iter(typed))]}\n"
                if isinstance(typed, dict)
                else f"[n]\nf = {rendered}\n"
            )
            file.write_text(body, encoding="utf-8")
        value = schema.load(["--config", str(file)], env={}).record.f
    elif path == "override":
        ctx = publish(schema.record(), role="test")
        ctx.override("ops", f=text)
        value = ctx.value("f")
    elif path == "pickle":
        record = schema.load(["--f", text], env={}).record
        value = pickle.loads(pickle.dumps(record)).f
    else:
        ctx = publish(schema.load(["--f", text], env={}).record, role="test")
        value = ctx.value("f")
        shown = ctx.resolved_dict()["n"]["f"]
        assert shown == thaw(value)
        if isinstance(shown, (list, dict)):
            shown.clear()  # a copy: the context keeps its value
            assert ctx.value("f") == expected
    assert value == expected
    if isinstance(value, dict):
        assert isinstance(value, FrozenDict)
    assert not isinstance(value, (list, set, dict)) or isinstance(value, FrozenDict)


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


@pytest.mark.parametrize("tp", [datetime.timedelta, Union[int, list[int]], dict[int, int], list[complex]])  # noqa: UP007
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
    schema = schema_for(tp, default)
    record = schema.load(["--f", text], env={}).record
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
