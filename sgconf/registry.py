"""The namespace registry: which class owns which path, and which namespace owns each field.

Routing of overrides, env vars and CLI flags is by flat field name, so a name may be
declared once across all namespaces; a duplicate fails at import with both owners named.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import attrs

from sgconf.errors import DeclarationError
from sgconf.fields import FieldSpec, spec_of

T = TypeVar("T")


@attrs.frozen(slots=True)
class FieldInfo:
    """Everything known about one declared field, flat-name addressable."""

    name: str
    namespace: str
    owner: type
    type: Any
    default: Any
    spec: FieldSpec

    @property
    def path(self) -> str:
        """The `$.namespace.field` path used in error messages."""
        return f"$.{self.namespace}.{self.name}"

    @property
    def flag(self) -> str:
        return self.spec.cli or "--" + self.name.replace("_", "-")

    @property
    def env_var(self) -> str:
        return "SGCONF_" + self.name.upper()

    @property
    def choices(self) -> tuple[Any, ...] | None:
        return literal_choices(self.type)

    @property
    def accessor(self) -> str:
        """The accessor expression that reads this field, e.g. `get_exec().kernel.attention_backend`."""
        top, _, rest = self.namespace.partition(".")
        chain = f".{rest}" if rest else ""
        return f"get_{top}(){chain}.{self.name}"


# path -> class, in declaration order; top-level paths have no dot.
_NAMESPACES: dict[str, type] = {}
# group path -> {child attribute name: child path}
_GROUPS: dict[str, dict[str, str]] = {}
_FIELDS: dict[str, FieldInfo] = {}


def namespace(path: str) -> Callable[[type[T]], type[T]]:
    """Class decorator: make `cls` a frozen slotted attrs bag registered at `path`."""

    def wrap(cls: type[T]) -> type[T]:
        bag = attrs.frozen(slots=True)(cls)
        attrs.resolve_types(bag)  # type: ignore[type-var]
        if path in _NAMESPACES:
            raise DeclarationError(f"namespace '{path}' declared twice ({_NAMESPACES[path].__name__}, {bag.__name__})")
        new: dict[str, FieldInfo] = {}
        for a in attrs.fields(bag):  # type: ignore[arg-type]
            spec = spec_of(a)
            if spec is None:
                raise DeclarationError(
                    f"field '{a.name}' of {bag.__name__} is not declared with setting() -- use sgconf.fields.setting"
                )
            if a.name in _FIELDS:  # (attrs already refuses a name twice within one class)
                msg = (
                    f"field '{a.name}' is declared in both {_FIELDS[a.name].owner.__name__} and {bag.__name__} -- "
                    "field names are routed flat and must be unique across namespaces"
                )
                raise DeclarationError(msg)
            default = a.default.factory() if isinstance(a.default, attrs.Factory) else a.default  # type: ignore[union-attr,arg-type]
            new[a.name] = FieldInfo(a.name, path, bag, a.type, default, spec)
        if any(info.spec.secret for info in new.values()):
            bag.__repr__ = _redacted_bag_repr  # type: ignore[method-assign]
        _NAMESPACES[path] = bag
        _FIELDS.update(new)
        return bag

    return wrap


def _redacted_bag_repr(self: Any) -> str:
    parts = []
    for a in attrs.fields(type(self)):
        value = getattr(self, a.name)
        spec = spec_of(a)
        shown = "'***'" if spec is not None and spec.secret and value is not None else repr(value)
        parts.append(f"{a.name}={shown}")
    return f"{type(self).__name__}({', '.join(parts)})"


def group(path: str, children: dict[str, str]) -> Callable[[type[T]], type[T]]:
    """Class decorator for a bag that only nests sub-namespaces (`exec` holds `exec.kernel`, ...)."""

    def wrap(cls: type[T]) -> type[T]:
        bag = attrs.frozen(slots=True)(cls)
        attrs.resolve_types(bag)  # type: ignore[type-var]
        _NAMESPACES[path] = bag
        _GROUPS[path] = dict(children)
        return bag

    return wrap


def literal_choices(tp: Any) -> tuple[Any, ...] | None:
    """The allowed values of a Literal (or Optional Literal) type, None when unrestricted."""
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return typing.get_args(tp)
    if origin in (typing.Union, _UnionType):
        for arg in typing.get_args(tp):
            found = literal_choices(arg)
            if found is not None:
                return found
    return None


try:
    from types import UnionType as _UnionType
except ImportError:  # pragma: no cover - python < 3.10 is unsupported anyway
    _UnionType = typing.Union  # type: ignore[misc,assignment]


def fields() -> dict[str, FieldInfo]:
    """All declared fields by flat name, in declaration order (a fresh dict; safe to mutate)."""
    return dict(_FIELDS)


def field_names() -> list[str]:
    """Every declared field name; `tools.ratchet` reads this as its default field source."""
    return list(_FIELDS)


def field_info(name: str) -> FieldInfo:
    """Look up one field; raises UnknownFieldError with a did-you-mean suggestion."""
    try:
        return _FIELDS[name]
    except KeyError:
        from sgconf.errors import Problem, UnknownFieldError
        from sgconf.suggest import did_you_mean

        msg = f"unknown field '{name}'{did_you_mean(name, _FIELDS)}"
        raise UnknownFieldError([Problem(f"$.{name}", msg)], header="unknown configuration field") from None


def apply_mode(names: Iterable[str]) -> str:
    """How a change to all of `names` at once applies: the strictest declared mode (restart > drain > step).

    Raises UnknownFieldError for an undeclared name.
    """
    order = {"step": 0, "drain": 1, "restart": 2}
    modes = [field_info(name).spec.apply for name in names]
    return max(modes, key=order.__getitem__) if modes else "step"


def namespace_of(name: str) -> str:
    """The namespace path that declares `name`, e.g. `"exec.kernel"` for `attention_backend`."""
    return field_info(name).namespace


def namespace_class(path: str) -> type:
    return _NAMESPACES[path]


def namespaces() -> dict[str, type]:
    """Every namespace path (groups and leaves) -> class, in declaration order."""
    return dict(_NAMESPACES)


def leaf_namespaces() -> list[str]:
    """Paths of namespaces that declare fields (not pure groups)."""
    return [p for p in _NAMESPACES if p not in _GROUPS]


def top_level_namespaces() -> list[str]:
    """The bag names a context exposes: `model`, `device`, ..., `exec`."""
    return [p for p in _NAMESPACES if "." not in p]


def group_children(path: str) -> dict[str, str]:
    return dict(_GROUPS.get(path, {}))


def iter_fields_of(path: str) -> Iterator[FieldInfo]:
    for info in _FIELDS.values():
        if info.namespace == path:
            yield info
