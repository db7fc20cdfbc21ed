"""Field metadata (`FieldInfo`): everything a schema knows about one declared field, by flat name.

Routing of overrides, env vars and CLI flags is by flat field name, so a name may be
declared once across all namespaces of a schema; a duplicate fails at declaration with
both owners named. Lookups are methods of the schema (`schema.field_info(name)`): there
is no process-wide default schema to ask.
"""

from __future__ import annotations

import typing
from typing import Any

import attrs

from sgconf.fields import FieldSpec
from sgconf.kinds import ClassKind, class_kind
from sgconf.redaction import hidden, redact


@attrs.frozen(slots=True, repr=False)
class FieldInfo:
    """Everything known about one declared field, flat-name addressable; its repr shows the default as `shown` does."""

    name: str
    namespace: str
    owner: type
    type: Any
    default: Any
    setting: FieldSpec
    env_prefix: str = attrs.field(default="SGCONF_", kw_only=True)
    accessor_module: str = attrs.field(default="runtime", kw_only=True)
    # how `sgconf.convert` structures this field's values, worked out at its first conversion
    plan: Any = attrs.field(default=None, init=False, eq=False, repr=False)

    @property
    def path(self) -> str:
        """The `$.namespace.field` path used in error messages."""
        return f"$.{self.namespace}.{self.name}"

    def shown(self, value: Any) -> Any:
        """`value` of this field as it may be printed or served: redacted when the field is secret."""
        return redact(value, self.setting.secret)

    def hides(self, value: Any) -> bool:
        """Whether `shown(value)` redacts `value`: a set value of a secret field."""
        return hidden(value, self.setting.secret)

    def __repr__(self) -> str:
        parts = (
            f"{a.name}={self.shown(self.default) if a.name == 'default' else getattr(self, a.name)!r}"
            for a in attrs.fields(type(self))
            if a.repr
        )
        return f"{type(self).__name__}({', '.join(parts)})"

    @property
    def flag(self) -> str:
        return self.setting.cli or "--" + self.name.replace("_", "-")

    @property
    def flags(self) -> tuple[str, ...]:
        """The flag, then its declared aliases: every spelling the command line accepts."""
        return (self.flag, *self.setting.aliases)

    @property
    def env_var(self) -> str:
        return self.env_prefix + self.name.upper()

    @property
    def choices(self) -> tuple[Any, ...] | None:
        """The values the field accepts: its Literal's, its Enum's member values, or the names its plug-in registry holds now."""
        if self.setting.plugin is not None:
            return tuple(self.setting.plugin.names())
        found = literal_choices(self.type)
        if found is not None:
            return found
        union = typing.get_origin(self.type) in (typing.Union, _UnionType)
        members = [
            a for a in (typing.get_args(self.type) if union else (self.type,)) if class_kind(a) is ClassKind.ENUM
        ]
        return tuple(m.value for m in members[0]) if members else None

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


__all__ = ["FieldInfo", "literal_choices"]
