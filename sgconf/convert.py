"""One cattrs converter for every layer: files give typed values, env vars and CLI flags give strings.

The string hooks are strict on purpose: `"1.5"` is not an int and `"maybe"` is not a
bool, so a typo fails loudly instead of turning into a surprising default.
"""

from __future__ import annotations

import contextlib
import datetime
import enum
import json
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

import cattrs

from sgconf.durations import FORMAT, from_seconds, parse_duration
from sgconf.errors import ConversionError
from sgconf.fieldinfo import FieldInfo, literal_choices
from sgconf.frozen import deep_freeze
from sgconf.kinds import ClassKind, class_kind
from sgconf.subrecords import is_record_type, sub_fields

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}
_NONE = {"none", "null"}


def means_none(value: Any) -> bool:
    """Whether `value` is text an optional setting reads as None (`none`, `null`, in any case, spaces around)."""
    return isinstance(value, str) and value.strip().lower() in _NONE


def _to_int(value: Any, _: type) -> int:
    if isinstance(value, str):
        try:
            return int(value.strip().replace("_", ""), 10)
        except ValueError:
            pass
    elif isinstance(value, float) and value.is_integer():
        return int(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ConversionError("expected an integer, not a boolean" if isinstance(value, bool) else "expected an integer")


def _any_float(value: Any) -> float:
    """`value` as a float, infinities and NaN included: the one number parser both float hooks share."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConversionError("expected a number, not a boolean" if isinstance(value, bool) else "expected a number")
    try:
        return float(value.strip() if isinstance(value, str) else value)
    except ValueError:
        raise ConversionError("expected a number") from None
    except OverflowError:  # an integer beyond the float range
        raise ConversionError("expected a finite number (too large for a float)") from None


def _to_float(value: Any, _: type) -> float:
    out = _any_float(value)
    if not math.isfinite(out):
        raise ConversionError("expected a finite number")
    return out


def _to_duration(value: Any, _: type) -> datetime.timedelta:
    if isinstance(value, datetime.timedelta):
        return value
    if isinstance(value, str):
        try:
            return parse_duration(value)
        except ValueError as exc:
            raise ConversionError(str(exc)) from None
    try:
        return from_seconds(_any_float(value))
    except ValueError as exc:
        raise ConversionError(f"{exc} -- or give {FORMAT}") from None


def _to_bool(value: Any, _: type) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    raise ConversionError("expected a boolean (true/false, 1/0, yes/no, on/off)")


def _to_str(value: Any, _: type) -> str:
    if isinstance(value, str):
        return value
    raise ConversionError("expected a string")


def _to_dict(value: Any, tp: type) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConversionError(f"expected a JSON object ({exc.msg} at char {exc.pos})") from None
    if not isinstance(value, Mapping):
        raise ConversionError("expected an object")
    bad = _non_json(value, "")
    if bad is not None:
        raise ConversionError(f"expected a JSON object ({bad})")
    return dict(value)


_JSON_SCALARS = (str, int, float, bool, type(None))


def _non_json(value: Any, at: str) -> str | None:
    """Where `value` stops being plain JSON, e.g. `'d' is a date`; None when it is JSON throughout.

    Dict-valued settings travel as JSON (HTTP bodies, other ranks, `show --format json`), so a
    TOML date or a YAML set is refused at load instead of failing later in a dump.
    """
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"key {key!r}{' in ' + repr(at) if at else ''} is not a string"
            found = _non_json(item, f"{at}.{key}" if at else key)
            if found is not None:
                return found
        return None
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = _non_json(item, f"{at}[{i}]")
            if found is not None:
                return found
        return None
    if isinstance(value, float) and not math.isfinite(value):  # JSON has no NaN or Infinity
        return f"{at!r} is {value!r}, not a JSON number"
    if isinstance(value, _JSON_SCALARS):
        return None
    return f"{at!r} is a {type(value).__name__}"


def _split(value: Any, what: str) -> Any:
    """A sequence from a string: JSON (`[1, 2]`) or comma-separated (`1,2`); anything else as it is."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                return json.loads(text)
            except json.JSONDecodeError as exc:
                raise ConversionError(f"expected a JSON list ({exc.msg})") from None
        return [part.strip() for part in text.split(",") if part.strip()]
    if isinstance(value, (list, tuple, set, frozenset)):
        return value
    raise ConversionError(f"expected {what}")


def _sequence_hook(tp: Any, conv: cattrs.Converter) -> Any:
    """The hook for list, tuple (fixed or variadic), set and frozenset fields: items converted by `conv`, strictly."""
    origin = typing.get_origin(tp) or tp
    args = typing.get_args(tp)
    fixed = origin is tuple and args and args[-1] is not Ellipsis
    item = Any if not args else args[0]
    what = {list: "a list", tuple: "a list", set: "a set", frozenset: "a set"}[origin]

    def hook(value: Any, _: Any) -> Any:
        items = list(_split(value, what))
        if fixed:
            if len(items) != len(args):
                raise ConversionError(f"expected {len(args)} items, got {len(items)}")
            return tuple(_item(conv, items[i], t, i) for i, t in enumerate(args))
        out = [_item(conv, v, item, i) for i, v in enumerate(items)]
        return frozenset(out) if origin in (set, frozenset) else out

    return hook


def _item(conv: cattrs.Converter, value: Any, tp: Any, at: Any) -> Any:
    """One item of a container converted by `conv`, its position named when it fails."""
    if tp is Any:
        return value
    inner = _strip_optional(tp)
    if value is None and inner is not tp:
        return None
    choices = literal_choices(inner)
    try:
        return _to_choice(value, choices) if choices is not None else conv.structure(value, inner)
    except ConversionError as exc:  # the innermost item's expectation is the one a secret's message keeps
        raise ConversionError(f"item {at!r}: {exc}", item=exc.item or describe_type(tp)) from None
    except (cattrs.BaseValidationError, ValueError, TypeError, ArithmeticError) as exc:
        raise ConversionError(f"item {at!r}: expected {describe_type(tp)} ({exc})", item=describe_type(tp)) from None


def _dict_hook(tp: Any, conv: cattrs.Converter) -> Any:
    """The hook for dict fields: a JSON object, its values converted to the declared value type by `conv`."""
    args = typing.get_args(tp)
    value_type = args[1] if len(args) == 2 else Any

    def hook(value: Any, _: Any) -> dict[str, Any]:
        plain = _to_dict(value, tp)
        if value_type is Any:
            return plain
        return {key: _item(conv, item, value_type, key) for key, item in plain.items()}

    return hook


def _record_hook(tp: type, conv: cattrs.Converter) -> Any:
    """The hook for a record-typed setting: an object (or its JSON text) whose keys are the class's fields.

    Each key is converted by `conv` to its field's declared type, strictly; an unknown key
    or a missing required one is a problem naming it, never a raw library error.
    """
    fields = {f.name: f for f in sub_fields(tp)}

    def hook(value: Any, _: Any) -> Any:
        if isinstance(value, tp):
            return value
        given = _to_dict(value, tp)
        unknown = sorted(set(given) - set(fields))
        if unknown:
            raise ConversionError(f"unknown key {unknown[0]!r} -- {tp.__name__} takes {', '.join(fields)}")
        missing = [name for name, f in fields.items() if f.required and name not in given]
        if missing:
            raise ConversionError(f"missing key {missing[0]!r} -- {tp.__name__} needs {', '.join(missing)}")
        kwargs = {name: _item(conv, item, fields[name].type, name) for name, item in given.items()}
        try:
            return deep_freeze(tp(**kwargs))  # defaults built by the class are frozen too
        except (ValueError, TypeError) as exc:
            raise ConversionError(f"expected {describe_type(tp)} ({exc})") from None

    return hook


def _to_enum(value: Any, tp: type[enum.Enum]) -> enum.Enum:
    """An enum member from itself, its value, or (from text) its value's or its name's spelling in any case."""
    if isinstance(value, tp):
        return value
    for member in tp:
        if type(value) is type(member.value) and value == member.value:
            return member
    if isinstance(value, str):
        text = value.strip().lower()
        for member in tp:
            if text in (str(member.value).lower(), member.name.lower()):
                return member
    raise ConversionError(f"expected {_describe_class(tp)}")


def _or_enum(to_scalar: Callable[[Any, type], Any]) -> Callable[[Any, type], Any]:
    """`to_scalar`, except for an enum deriving from its scalar (`class Color(str, Enum)`), which gets its member.

    cattrs hands a class to the hook of its nearest registered base, and such an enum's
    `str` (or `int`) comes before `Enum`: without this it would come back as plain text.
    """

    def hook(value: Any, tp: type) -> Any:
        if issubclass(tp, enum.Enum):
            return _to_enum(value, tp)
        return to_scalar(value, tp)

    return hook


_SCALAR_HOOKS: dict[Any, Any] = {
    int: _or_enum(_to_int),
    float: _or_enum(_to_float),
    bool: _to_bool,
    str: _or_enum(_to_str),
}
# the hooks that return a value of exactly their type unchanged (a float may be refused: NaN, infinities)
_PASSING: dict[Any, Any] = {tp: _SCALAR_HOOKS[tp] for tp in (int, bool, str)}

_UNION_SCALARS = (int, float, bool, str)
_SEQUENCES: tuple[Any, ...] = (list, tuple, set, frozenset)


def scalar_union(tp: Any) -> tuple[Any, ...] | None:
    """The members of a `Union` of scalars (None left out), or None when `tp` is not one."""
    if typing.get_origin(tp) not in (typing.Union, types.UnionType):
        return None
    members = tuple(a for a in typing.get_args(tp) if a is not type(None))
    return members if len(members) > 1 and all(m in _UNION_SCALARS for m in members) else None


def _union_hook(tp: Any, conv: cattrs.Converter) -> Any:
    """A `Union` of scalars: an exact type match first, else the first member (in declared order) that converts."""
    members = scalar_union(tp) or ()

    def hook(value: Any, _: Any) -> Any:
        for member in members:
            if type(value) is member:
                return value
        for member in members:
            with contextlib.suppress(ConversionError):
                return conv.structure(value, member)
        raise ConversionError(f"expected {' or '.join(describe_type(m) for m in members)}")

    return hook


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter()
    for scalar, hook in _SCALAR_HOOKS.items():
        conv.register_structure_hook(scalar, hook)
    conv.register_structure_hook(datetime.timedelta, _to_duration)
    # two-argument factories: cattrs hands them the converter that structures, so a copy's hooks apply to items
    factories: list[tuple[Callable[[Any], bool], Any]] = [
        (lambda t: t is dict or typing.get_origin(t) is dict, _dict_hook),
        (lambda t: (typing.get_origin(t) or t) in _SEQUENCES, _sequence_hook),
        (lambda t: scalar_union(t) is not None, _union_hook),
    ]
    conv.register_structure_hook_func(lambda t: class_kind(t) is ClassKind.ENUM, _to_enum)
    conv.register_structure_hook_factory(is_record_type, _record_hook)
    for predicate, factory in factories:
        conv.register_structure_hook_factory(predicate, factory)
    return conv  # `Any` needs no hook: cattrs hands such a value back as it is


converter = _make_converter()


def structure(value: Any, info: FieldInfo, conv: cattrs.Converter | None = None) -> Any:
    """Convert one raw value (typed, or a string from env/CLI/HTTP) to the field's type, deep-frozen.

    `conv` is the schema's converter (the shared one when None). Raises ConversionError
    with a lowercase message naming what was expected.
    """
    conv = conv or converter
    plan = info.plan
    if plan is None or plan.conv is not conv:
        plan = _Plan(info, conv)
        object.__setattr__(info, "plan", plan)  # a cache on a frozen object: not part of its value
    if type(value) is plan.exact:
        return value  # what the converter's own hook would hand back, unchanged (an override's usual case)
    return deep_freeze(plan.structure(value))


class _Plan:
    """What structuring a field's values needs to know of its type, worked out once per field and converter.

    An override converts one value; taking the field's type apart again each time (its
    Optional, its Literal choices) cost more than the conversion itself.
    """

    __slots__ = ("conv", "tp", "optional", "inner", "choices", "any_float", "exact")

    def __init__(self, info: FieldInfo, conv: cattrs.Converter) -> None:
        self.conv = conv
        self.tp = info.type
        self.optional = type(None) in typing.get_args(self.tp)
        self.inner = _strip_optional(self.tp)
        self.any_float = self.inner is float and info.setting.nonfinite
        self.choices = literal_choices(self.inner)
        # the scalar type whose values the converter returns as they are (ours, not a schema's own hook;
        # a cattrs before 24.1 cannot say which hook it holds, so it gets no shortcut)
        hook = _PASSING.get(self.inner) if self.choices is None and not self.any_float else None
        lookup = getattr(conv, "get_structure_hook", None)
        self.exact = self.inner if hook is not None and lookup is not None and lookup(self.inner) is hook else None

    def structure(self, value: Any) -> Any:
        if value is None:
            if self.optional:
                return None
            raise ConversionError(f"expected {describe_type(self.tp)}")
        if self.optional and means_none(value):
            return None
        if self.any_float:
            return _any_float(value)
        if self.choices is not None:
            return _to_choice(value, self.choices)
        try:
            return self.conv.structure(value, self.inner)
        except ConversionError:
            raise
        except (cattrs.BaseValidationError, ValueError, TypeError, ArithmeticError) as exc:
            raise ConversionError(f"expected {describe_type(self.tp)} ({exc})") from None


def _to_choice(value: Any, choices: tuple[Any, ...]) -> Any:
    if value in choices:
        return value
    if isinstance(value, str):
        for choice in choices:
            if isinstance(choice, str) and choice.lower() == value.strip().lower():
                return choice
    shown = ", ".join(repr(c) for c in choices)
    raise ConversionError(f"expected one of {shown}")


def _strip_optional(tp: Any) -> Any:
    args = typing.get_args(tp)
    if type(None) in args:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
        return typing.Union[tuple(rest)]  # noqa: UP007
    return tp


def describe_type(tp: Any) -> str:
    """A short human name for a field type: `an integer`, `one of 'a', 'b'`, `an integer or null`."""
    choices = literal_choices(tp)
    inner = _strip_optional(tp)
    optional = inner is not tp
    if choices is not None:
        text = "one of " + ", ".join(repr(c) for c in choices)
    else:
        origin = typing.get_origin(inner) or inner
        text = {
            int: "an integer",
            float: "a number",
            bool: "a boolean",
            str: "a string",
            dict: "a JSON object",
            list: "a list",
            tuple: "a list",
            set: "a set",
            frozenset: "a set",
        }.get(origin) or _describe_class(inner)
    return f"{text} or null" if optional else text


def _describe_class(tp: Any) -> str:
    kind = class_kind(tp)
    if kind is ClassKind.ENUM:
        return "one of " + ", ".join(repr(m.value) for m in tp)
    if kind is ClassKind.RECORD:
        return f"an object of {', '.join(f.name for f in sub_fields(tp))}"
    if kind is ClassKind.PATH:
        return "a path"
    if kind is ClassKind.DURATION:
        return "a duration"
    return str(tp)
