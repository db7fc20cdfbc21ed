"""Field metadata (`FieldInfo`) and the lookups of the built-in serving schema by flat name.

Routing of overrides, env vars and CLI flags is by flat field name, so a name may be
declared once across all namespaces of a schema; a duplicate fails at declaration with
both owners named. The module-level functions answer for the built-in serving schema
(`sgconf.SERVING`); a runtime with a schema of its own asks its `Schema` the same questions.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import attrs

from sgconf.fields import FieldSpec

if TYPE_CHECKING:
    from sgconf.schema import Schema


@attrs.frozen(slots=True)
class FieldInfo:
    """Everything known about one declared field, flat-name addressable."""

    name: str
    namespace: str
    owner: type
    type: Any
    default: Any
    spec: FieldSpec
    env_prefix: str = attrs.field(default="SGCONF_", kw_only=True)
    accessor_module: str = attrs.field(default="runtime", kw_only=True)

    @property
    def path(self) -> str:
        """The `$.namespace.field` path used in error messages."""
        return f"$.{self.namespace}.{self.name}"

    @property
    def flag(self) -> str:
        return self.spec.cli or "--" + self.name.replace("_", "-")

    @property
    def env_var(self) -> str:
        return self.env_prefix + self.name.upper()

    @property
    def choices(self) -> tuple[Any, ...] | None:
        return literal_choices(self.type)

    @property
    def accessor(self) -> str:
        """The accessor expression that reads this field, e.g. `get_exec().kernel.attention_backend`."""
        top, _, rest = self.namespace.partition(".")
        chain = f".{rest}" if rest else ""
        return f"get_{top}(){chain}.{self.name}"


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


# The built-in serving schema, set by `sgconf.namespaces` when it is declared (importing any
# sgconf module runs the package front door, which declares it first). Held here, not
# imported, so the modules below the schema never import the modules above them.
_serving: list[Schema] = []


def set_serving(schema: Schema) -> None:
    """Make `schema` the one the module-level lookups (and every `schema=None` default) answer for."""
    _serving[:] = [schema]


def serving() -> Schema:
    """The built-in serving schema (declared in `sgconf.namespaces`)."""
    if not _serving:
        raise RuntimeError("the serving schema is not declared yet -- import sgconf first")
    return _serving[0]


def fields() -> dict[str, FieldInfo]:
    """All fields of the serving schema by flat name, in declaration order (a fresh dict)."""
    return serving().fields()


def field_names() -> list[str]:
    """Every serving field name; `tools.ratchet` reads this as its default field source."""
    return serving().field_names()


def field_info(name: str) -> FieldInfo:
    """Look up one serving field; raises UnknownFieldError with a did-you-mean suggestion."""
    return serving().field_info(name)


def apply_mode(names: Iterable[str]) -> str:
    """How a change to all of `names` at once applies: the strictest declared mode (restart > drain > step).

    Raises UnknownFieldError for an undeclared name.
    """
    order = {"step": 0, "drain": 1, "restart": 2}
    modes = [field_info(name).spec.apply for name in names]
    return max(modes, key=order.__getitem__) if modes else "step"


def namespace_of(name: str) -> str:
    """The namespace path that declares `name`, e.g. `"exec.kernel"` for `attention_backend`."""
    return serving().namespace_of(name)


def namespace_class(path: str) -> type:
    return serving().namespace_class(path)


def namespaces() -> dict[str, type]:
    """Every namespace path (groups and leaves) -> class, in declaration order."""
    return serving().namespaces()


def leaf_namespaces() -> list[str]:
    """Paths of namespaces that declare fields (not pure groups)."""
    return serving().leaf_namespaces()


def top_level_namespaces() -> list[str]:
    """The bag names a context of the serving schema exposes: `model`, `device`, ..., `exec`."""
    return serving().top_level_namespaces()


def group_children(path: str) -> dict[str, str]:
    return serving().group_children(path)


def iter_fields_of(path: str) -> Iterator[FieldInfo]:
    return serving().iter_fields_of(path)
