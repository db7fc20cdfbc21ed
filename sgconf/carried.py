"""Which field types the framework carries on every path, checked when a schema is frozen.

A field whose type no layer can convert would fail late, with a raw library error, on the
first config file, flag or override that sets it. Freezing refuses it instead, naming the
field and the type, so an adopter learns at declaration what to change.
"""

from __future__ import annotations

import types
import typing
from typing import Any

import cattrs
from cattrs.errors import StructureHandlerNotFoundError

from sgconf.convert import _strip_optional, scalar_union
from sgconf.errors import DeclarationError
from sgconf.fieldinfo import FieldInfo, literal_choices
from sgconf.kinds import ClassKind, class_kind
from sgconf.subrecords import is_frozen_record_type, sub_fields

_CONTAINERS = (list, tuple, set, frozenset, dict)


def check_carried(info: FieldInfo, conv: cattrs.Converter) -> None:
    """Raise DeclarationError when field `info`'s type cannot be converted on every path by `conv`."""
    why = _unsupported(info.type, conv)
    if why is None and info.setting.nonfinite and _strip_optional(info.type) is not float:
        raise DeclarationError(
            f"field '{info.name}' declares nonfinite=True but has type {_name(info.type)} -- nonfinite applies to "
            "a float (or optional float) setting only"
        )
    if why is not None:
        msg = (
            f"field '{info.name}' has type {_name(info.type)}, which sgconf cannot carry: {why} -- use a scalar, "
            "Literal, Enum, Path, timedelta, a frozen dataclass or attrs class, a tuple/list/set of those, "
            "dict[str, ...], or register a structure hook for the type on schema.converter before the schema is frozen"
        )
        raise DeclarationError(msg)


def _unsupported(tp: Any, conv: cattrs.Converter) -> str | None:
    if tp is Any or literal_choices(tp) is not None or scalar_union(tp) is not None:
        return None
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return _unsupported(rest[0], conv)
        return f"a Union of {', '.join(_name(a) for a in rest)} (only a Union of int, float, bool and str converts)"
    if origin in _CONTAINERS:
        if origin is dict and args and args[0] is not str:
            return f"dict keys are {_name(args[0])} (they are strings in every config file and on the command line)"
        for arg in args[1:] if origin is dict else args:
            if arg is Ellipsis:
                continue
            found = _unsupported(arg, conv)
            if found is not None:
                return found
        return None
    kind = class_kind(tp)
    if kind is ClassKind.ENUM:
        return None
    if kind is ClassKind.RECORD:
        if not is_frozen_record_type(tp):
            return (
                f"{_name(tp)} is a mutable class, and its instance would be shared by every reader of the bag "
                "(declare it with @dataclass(frozen=True) or @attrs.frozen)"
            )
        try:
            subs = sub_fields(tp)
        except (NameError, TypeError) as exc:
            return f"the annotations of {_name(tp)} do not resolve ({exc})"
        for sub in subs:
            found = _unsupported(sub.type, conv)
            if found is not None:
                return f"its field {sub.name!r}: {found}"
        return None
    try:
        conv.get_structure_hook(tp)
    except StructureHandlerNotFoundError:
        return f"no conversion is registered for {_name(tp)}"
    return None


def _name(tp: Any) -> str:
    return tp.__name__ if isinstance(tp, type) and not typing.get_args(tp) else str(tp).replace("typing.", "")


__all__ = ["check_carried"]
