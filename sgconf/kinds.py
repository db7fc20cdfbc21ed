"""The classes a field type can be besides scalars and containers, told apart in one place.

Conversion errors, `--help` metavars, the JSON Schema, the check made when a schema is
frozen and a field's choices all ask one question of a class: is it an Enum, a path, a
duration or a record (a dataclass or attrs class)? `class_kind` answers it, so a kind
is added once and every layer that describes a type sees it.
"""

from __future__ import annotations

import datetime
import enum
import os
from typing import Any

from sgconf.subrecords import is_record_type


class ClassKind(enum.Enum):
    ENUM = "enum"
    PATH = "path"
    DURATION = "duration"
    RECORD = "record"


def class_kind(tp: Any) -> ClassKind | None:
    """The kind of class `tp` is, None for anything else (a scalar, a container, a Literal, a Union)."""
    if tp is datetime.timedelta:
        return ClassKind.DURATION
    if isinstance(tp, type):
        if issubclass(tp, enum.Enum):
            return ClassKind.ENUM
        if issubclass(tp, os.PathLike):
            return ClassKind.PATH
    return ClassKind.RECORD if is_record_type(tp) else None


__all__ = ["ClassKind", "class_kind"]
