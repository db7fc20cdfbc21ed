"""Building and copying frozen attrs instances from values checked already, with one plain slot store per field.

A frozen attrs class fills each field through a setattr call (its `__setattr__` refuses
plain stores), and `attrs.evolve` also runs every validator again: for a bag of a few
hundred fields that is most of what an override (and a publish's bags) cost. The values
given here were converted and checked already (a built record's, an override's), so
both functions fill a mutable twin of the class instead (a subclass
adding no slots and no `__dict__`, whose attribute store is the generic one) and then
give the finished instance the class itself (`__class__` assignment: the layouts are the
same), after which it is frozen like any other. The twin never escapes this module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs

T = TypeVar("T")

_TWIN = "_sgconf_twin"
_COPIER = "_sgconf_copier"
_BUILDER = "_sgconf_builder"


def _twin(cls: type) -> type:
    twin: type | None = cls.__dict__.get(_TWIN)
    if twin is None:
        ns = {"__slots__": (), "__setattr__": object.__setattr__, "__delattr__": object.__delattr__}
        twin = type(f"_Mutable{cls.__name__}", (cls,), ns)
        setattr(cls, _TWIN, twin)
    return twin


def _names(cls: Any) -> list[str]:
    return [a.name for a in attrs.fields(cls)]


# the generated functions' own names (each with a suffix that no field name of the class has)
_LOCALS = ("inst", "new", "twin", "cls", "set", "obj", "changes", "name", "value")


def _generated(cls: type, key: str, params: list[str], body: list[str]) -> Any:
    """`def fn(*params)` filling a fresh twin `{new}` with `body`, then handing it over as a `cls`; kept on `cls` as `key`.

    The function's own names carry a suffix no field name has, so a field called `new`
    or `cls` is a field like any other.
    """
    taken = set(_names(cls))  # a builder's parameters are the field names; a copier's attribute names never clash
    tag = "_"
    while any(n + tag in taken for n in _LOCALS):
        tag += "_"
    scope: dict[str, Any] = {
        f"new{tag}": object.__new__,
        f"twin{tag}": _twin(cls),
        f"cls{tag}": cls,
        f"set{tag}": setattr,
    }
    lines = [
        f"def fn({', '.join(params).format(tag=tag)}):",
        f"    inst{tag} = new{tag}(twin{tag})",
        *(line.format(new=f"inst{tag}", tag=tag) for line in body),
        f"    inst{tag}.__class__ = cls{tag}",
        f"    return inst{tag}",
    ]
    exec("\n".join(lines), scope)  # noqa: S102 (generated from attribute names only, as attrs builds its own methods)
    setattr(cls, key, scope["fn"])
    return scope["fn"]


def replaced(obj: T, changes: Mapping[str, Any]) -> T:
    """`attrs.evolve(obj, **changes)` for values validated already: every other field shared, no validator run."""
    cls = type(obj)
    copier = cls.__dict__.get(_COPIER)
    if copier is None:
        body = [f"    {{new}}.{n} = obj{{tag}}.{n}" for n in _names(cls)]
        body += [
            "    for name{tag}, value{tag} in changes{tag}.items():",
            "        set{tag}({new}, name{tag}, value{tag})",
        ]
        copier = _generated(cls, _COPIER, ["obj{tag}", "changes{tag}"], body)
    return copier(obj, changes)  # type: ignore[no-any-return]


def builder(cls: type[T]) -> Callable[..., T]:
    """A constructor of `cls` taking every field positionally, in declaration order, for values checked already.

    No default, converter or validator runs: for records whose fields are all given and
    need no checking (a commit's own records), built many times a second.
    """
    found = cls.__dict__.get(_BUILDER)
    if found is None:
        names = _names(cls)
        found = _generated(cls, _BUILDER, names, [f"    {{new}}.{n} = {n}" for n in names])
    return found  # type: ignore[no-any-return]


__all__ = ["builder", "replaced"]
