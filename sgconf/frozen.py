"""Deeply immutable containers for list- and dict-valued settings.

A bag is frozen, but a dict held by a frozen bag is not: without this module
`get_memory().hicache_storage_backend_extra_config["dir"] = "/x"` would change the
bag and the raw record behind the context's back, with no new generation and the same
fingerprint. Every value a record or a bag stores goes through `deep_freeze`: lists
and tuples become tuples, dicts become `FrozenDict`, recursively.

`FrozenDict` subclasses `dict` on purpose: `json.dumps`, FastAPI and every
`isinstance(value, dict)` check keep treating it as a plain object, so dumps, the HTTP
layer and other ranks see the same JSON as before; only mutation is refused.
"""

from __future__ import annotations

import datetime
import enum
import math
import operator
import os
import typing
from collections.abc import Collection, Mapping
from typing import Any, NoReturn

from sgconf.durations import format_duration
from sgconf.errors import ReadOnlyError
from sgconf.subrecords import is_record_type, rebuilt, values_of

_SCALARS = (str, int, float, bool, bytes, type(None))
# exact types `thaw` hands back as they are (an enum member subclassing str or int is not one)
_PLAIN = frozenset((str, int, bool, bytes, type(None)))


def _refuse(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
    msg = "config values are read-only: this mapping belongs to a published config bag -- use get_context().override(...) to change it"
    raise ReadOnlyError(msg)


class FrozenDict(dict):  # type: ignore[type-arg]
    """A read-only dict whose values are frozen too; mutation raises TypeError, hashing works."""

    __slots__ = ("_hash",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # once built, never again: `d.__init__(...)` would refill a live bag's dict in place
        try:
            _HASH_SLOT.__get__(self)
        except AttributeError:
            pass
        else:
            _refuse(self)
        items = dict(*args, **kwargs)
        dict.__init__(self, {key: deep_freeze(value) for key, value in items.items()})
        _set_hash(self, None)

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        # the cached hash, and `__class__`, are not the caller's to change
        _refuse(self)

    def __delattr__(self, name: str) -> NoReturn:
        _refuse(self)

    __setitem__ = _refuse
    __delitem__ = _refuse
    __ior__ = _refuse  # type: ignore[assignment]
    clear = _refuse
    pop = _refuse
    popitem = _refuse
    setdefault = _refuse
    update = _refuse

    def __hash__(self) -> int:  # type: ignore[override]
        cached = getattr(self, "_hash", None)
        if cached is None:
            cached = hash(frozenset(self.items()))
            _set_hash(self, cached)
        return cached

    def __reduce__(self) -> tuple[Any, ...]:
        # pickle and copy rebuild through __init__, never through the refused __setitem__
        return (FrozenDict, (dict(self),))

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenDict:
        return self

    def __repr__(self) -> str:
        return f"FrozenDict({dict.__repr__(self)})"


_HASH_SLOT: Any = FrozenDict.__dict__["_hash"]  # the slot itself: the one way in, for this module
_set_hash = _HASH_SLOT.__set__


def deep_freeze(value: Any) -> Any:
    """`value` with every list/tuple turned into a tuple and every mapping into a FrozenDict, recursively.

    Scalars and already-frozen values come back as they are (no copy), so freezing a
    record that holds no containers costs one type check per field.
    """
    kind = type(value)
    if kind in _SCALARS or kind is FrozenDict:
        return value
    if kind is tuple:
        frozen = tuple(deep_freeze(v) for v in value)
        return frozen if any(map(operator.is_not, frozen, value)) else value
    if isinstance(value, Mapping):
        return FrozenDict(value)
    if isinstance(value, (list, tuple)):
        return tuple(deep_freeze(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return frozenset(deep_freeze(v) for v in value)
    if is_record_type(kind):
        fields = values_of(value)
        changed = {k: f for k, v in fields.items() if (f := deep_freeze(v)) is not v}
        return rebuilt(value, changed) if changed else value
    return value


def thaw(value: Any) -> Any:
    """A plain, mutable copy: FrozenDicts become dicts and tuples lists, recursively (for dumps and JSON).

    An enum member becomes its value, a record-typed value an object of its fields, a path
    its text, a duration its `1h30m` spelling and an infinity or NaN its `inf`/`nan` text
    (JSON has no such number): what a config file or a flag spells them as, so a dump
    loads back equal.
    """
    kind = type(value)
    if kind in _PLAIN:  # the common case first: every override's log line thaws its values
        return value
    if kind is float:
        return value if math.isfinite(value) else str(value)
    if isinstance(value, enum.Enum):
        return thaw(value.value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, datetime.timedelta):
        return format_duration(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(v) for v in value]
    if isinstance(value, frozenset):
        return [thaw(v) for v in sorted(value, key=repr)]
    if is_record_type(type(value)):
        return {k: thaw(v) for k, v in values_of(value).items()}
    return value


__all__ = ["FrozenDict", "deep_freeze", "thaw"]


def may_hold_container(tp: Any) -> bool:
    """Whether a field of type `tp` can hold a list or a mapping (and so needs freezing on the way in)."""
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return False
    if origin is not None and typing.get_args(tp) and origin not in (dict, list, tuple, set, frozenset):
        # a union (Optional[...] included), Annotated, or an abstract collection
        if isinstance(origin, type) and issubclass(origin, (Mapping, Collection)) and origin is not str:
            return True
        return any(may_hold_container(arg) for arg in typing.get_args(tp))
    base = origin or tp
    if isinstance(base, type):
        return not issubclass(base, _SCALARS)  # `Any` and a record class too: its fields may hold containers
    return True  # unresolved (a string annotation, a TypeVar): freeze to be safe
