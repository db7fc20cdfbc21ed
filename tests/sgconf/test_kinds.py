"""`class_kind`: the one answer to "is this class an Enum, a path, a duration or a record?", and who asks it."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import pathlib
from typing import Any, Literal

import attrs
import pytest

from sgconf import Schema, setting
from sgconf.convert import describe_type
from sgconf.durations import FORMAT
from sgconf.flags import config_parser
from sgconf.json_schema import field_schema
from sgconf.kinds import ClassKind, class_kind


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1


@dataclasses.dataclass(frozen=True)
class Point:
    x: int = 0


@attrs.frozen
class Span:
    start: int = 0


class Later(datetime.timedelta):
    """A subclass is not the duration type the converter parses."""


@pytest.mark.parametrize(
    ("tp", "kind"),
    [
        (Color, ClassKind.ENUM),
        (Level, ClassKind.ENUM),
        (pathlib.Path, ClassKind.PATH),
        (pathlib.PurePosixPath, ClassKind.PATH),
        (datetime.timedelta, ClassKind.DURATION),
        (Point, ClassKind.RECORD),
        (Span, ClassKind.RECORD),
        (int, None),
        (str, None),
        (list[int], None),
        (Literal["a"], None),
        (int | None, None),
        (Later, None),
        (Any, None),
    ],
)
def test_each_class_has_one_kind(tp: Any, kind: ClassKind | None) -> None:
    assert class_kind(tp) is kind


def test_every_layer_describes_a_kind_the_same_way() -> None:
    """Conversion errors, --help metavars and the JSON Schema all follow the kind of each field's class."""
    schema = Schema("kinds", env_prefix="KINDS_")

    @schema.namespace("k")
    class K:
        wait: datetime.timedelta = setting(datetime.timedelta(seconds=5), help="a wait")
        where: pathlib.Path = setting(pathlib.Path("."), help="a directory")
        color: Color = setting(Color.RED, help="a color")
        point: Point = setting(Point(), help="a point")

    schema.freeze()
    fields = schema.fields()
    assert [describe_type(fields[n].type) for n in ("wait", "where", "color", "point")] == [
        "a duration",
        "a path",
        "one of 'red', 'blue'",
        "an object of x",
    ]
    usage = " ".join(config_parser("kinds", schema=schema).format_help().split())
    assert "--wait DURATION" in usage and "--where PATH" in usage and "--point JSON" in usage
    assert "--color {red,blue}" in usage
    wait, where, point = (field_schema(fields[n]) for n in ("wait", "where", "point"))
    assert (wait["type"], where["type"], point["type"]) == (["string", "number"], "string", "object")
    assert where["x-format"] == "a file system path" and "x-format" not in point
    assert wait["x-format"] == FORMAT
