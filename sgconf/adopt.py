"""`adopt`: a schema built from a record class a runtime already has, of whichever kind.

A code base with its own flat record (a dataclass, an attrs class, a msgspec `Struct`, a
pydantic model) adopts sgconf in steps: build a schema from the class (its field types,
defaults and help texts kept as they are), publish the instances its own loading builds,
move its readers to accessors (the read ratchet counts what is left), and only then move
its loading to `schema.load`.

The kinds are recognised by duck typing: sgconf imports neither msgspec nor pydantic, so
adopting a dataclass costs neither. A field without a default becomes a required setting
(`sgconf.fields.REQUIRED`): loading refuses a record without it and names the flags that
would set it. Fields a schema should not carry (private bookkeeping, handles) are left
out with `exclude=`, or the schema keeps only `include=`.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from sgconf.errors import DeclarationError
from sgconf.fields import REQUIRED, setting
from sgconf.schema import SCHEMA_ATTR, Schema
from sgconf.suggest import did_you_mean


@attrs.frozen(slots=True)
class RecordField:
    """One field of the user's record, whatever kind of class declared it."""

    name: str
    type: Any
    help: str
    default: Any = REQUIRED
    factory: Callable[[], Any] | None = None


def record_fields(cls: type) -> tuple[str, list[RecordField]]:
    """`(kind, fields)` of a dataclass, attrs class, msgspec Struct or pydantic model, in declaration order.

    Raises DeclarationError for any other class.
    """
    if dataclasses.is_dataclass(cls):
        return "dataclass", _dataclass_fields(cls)
    if attrs.has(cls):
        return "attrs", _attrs_fields(cls)
    if hasattr(cls, "__struct_fields__") and "msgspec" in sys.modules:
        return "msgspec", _msgspec_fields(cls)
    if isinstance(getattr(cls, "model_fields", None), dict) and hasattr(cls, "model_validate"):
        return "pydantic", _pydantic_fields(cls)
    msg = f"adopt() takes a dataclass, an attrs class, a msgspec Struct or a pydantic model, got {cls!r}"
    raise DeclarationError(msg + " -- declare the record as one of those, or declare a Schema directly")


def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # forward references the class's module cannot resolve: use the raw annotations
        return dict(getattr(cls, "__annotations__", {}))


def _help(name: str, text: Any) -> str:
    return str(text) if text else name.replace("_", " ")


def _dataclass_fields(cls: type) -> list[RecordField]:
    hints = _hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        help_text = _help(f.name, f.metadata.get("help"))
        if f.default is not dataclasses.MISSING:
            out.append(RecordField(f.name, hints.get(f.name, Any), help_text, f.default))
        elif f.default_factory is not dataclasses.MISSING:
            out.append(RecordField(f.name, hints.get(f.name, Any), help_text, factory=f.default_factory))
        else:
            out.append(RecordField(f.name, hints.get(f.name, Any), help_text))
    return out


def _attrs_fields(cls: type) -> list[RecordField]:
    hints = _hints(cls)
    out = []
    for a in attrs.fields(cls):
        help_text = _help(a.name, a.metadata.get("help"))
        tp = hints.get(a.name, a.type if a.type is not None else Any)
        if isinstance(a.default, attrs.Factory):  # type: ignore[arg-type]
            if a.default.takes_self:  # type: ignore[union-attr]
                msg = f"field {a.name!r} of {cls.__name__} has a default computed from the instance"
                raise DeclarationError(msg + " -- give it a plain default, or leave it out with exclude=")
            out.append(RecordField(a.name, tp, help_text, factory=a.default.factory))  # type: ignore[union-attr]
        elif a.default is attrs.NOTHING:
            out.append(RecordField(a.name, tp, help_text))
        else:
            out.append(RecordField(a.name, tp, help_text, a.default))
    return out


def _msgspec_fields(cls: type) -> list[RecordField]:
    structs = sys.modules["msgspec"].structs
    nodefault = sys.modules["msgspec"].NODEFAULT
    hints = _hints(cls)
    out = []
    for f in structs.fields(cls):
        tp = hints.get(f.name, f.type)
        help_text = _help(f.name, None)
        if f.default is not nodefault:
            out.append(RecordField(f.name, tp, help_text, f.default))
        elif f.default_factory is not nodefault:
            out.append(RecordField(f.name, tp, help_text, factory=f.default_factory))
        else:
            out.append(RecordField(f.name, tp, help_text))
    return out


def _pydantic_fields(cls: type) -> list[RecordField]:
    out = []
    for name, info in cls.model_fields.items():  # type: ignore[attr-defined]
        tp = info.annotation if info.annotation is not None else Any
        help_text = _help(name, info.description)
        if info.is_required():
            out.append(RecordField(name, tp, help_text))
        elif info.default_factory is not None:
            out.append(RecordField(name, tp, help_text, factory=info.default_factory))
        else:
            out.append(RecordField(name, tp, help_text, info.default))
    return out


def adopt(
    cls: type,
    *,
    namespaces: Mapping[str, Iterable[str]],
    others: str | None = None,
    include: Iterable[str] | None = None,
    exclude: Iterable[str] = (),
    hot: Iterable[str] = (),
    secret: Iterable[str] = (),
    nonfinite: Iterable[str] = (),
    name: str | None = None,
    env_prefix: str | None = None,
    record_name: str | None = None,
) -> Schema:
    """A frozen schema with one namespace per entry of `namespaces` (`{"lora": ["max_loras", ...]}`).

    `cls` is a dataclass, an attrs class, a msgspec Struct or a pydantic model. The
    schema holds the fields `include` names (all by default) minus `exclude`; those not
    listed in `namespaces` go to the namespace `others` (an error when None). `hot`,
    `secret` and `nonfinite` (float fields that accept inf and nan) mark fields as such.
    Publishing an instance of `cls` converts it to the schema's record, each value
    checked by the schema's converter. Raises
    DeclarationError, naming `cls` and the field, for a class of another kind, an
    unknown, private or twice-listed name, or a field left in no namespace.
    """
    kind, declared_list = record_fields(cls)
    declared = {f.name: f for f in declared_list}
    owner = cls.__name__

    def known(names: Iterable[str], what: str) -> set[str]:
        out = set()
        for n in names:
            if n not in declared:
                raise DeclarationError(f"{what} names {n!r}, which {owner} does not have{did_you_mean(n, declared)}")
            out.add(n)
        return out

    kept = known(include, "include=") if include is not None else set(declared)
    kept -= known(exclude, "exclude=")
    where: dict[str, str] = {}
    for path, names in namespaces.items():
        for field_name in names:
            if field_name not in declared:
                msg = f"namespace {path!r} lists {field_name!r}, which {owner} does not have{did_you_mean(field_name, declared)}"
                raise DeclarationError(msg)
            if field_name not in kept:
                raise DeclarationError(
                    f"namespace {path!r} lists {field_name!r} of {owner}, which include=/exclude= leave out"
                )
            if field_name in where:
                raise DeclarationError(
                    f"field {field_name!r} of {owner} is listed in both {where[field_name]!r} and {path!r}"
                )
            where[field_name] = path
    for field_name in declared:
        if field_name in kept and field_name.startswith("_"):
            msg = f"field {field_name!r} of {owner} is private, and settings are public names"
            raise DeclarationError(msg + f" -- leave it out with exclude=[{field_name!r}]")
    rest = [n for n in declared if n in kept and n not in where]
    if rest and others is None:
        msg = f"fields of {owner} not in any namespace: {', '.join(rest)} -- list them, or pass others='<namespace>'"
        raise DeclarationError(msg)
    for field_name in rest:
        where[field_name] = others  # type: ignore[assignment]
    marks = {"hot": known(hot, "hot="), "secret": known(secret, "secret="), "nonfinite": known(nonfinite, "nonfinite=")}
    for kind_, names_ in marks.items():
        dropped = sorted(names_ - kept)
        if dropped:
            raise DeclarationError(
                f"{kind_}= names {', '.join(map(repr, dropped))} of {owner}, which include=/exclude= leave out"
            )

    schema = Schema(name or owner.lower(), env_prefix=env_prefix, record_name=record_name or owner)
    # namespaces in the order the call lists them, `others` last; fields in the record's order
    by_path: dict[str, list[str]] = {path: [] for path in namespaces}
    for field_name in declared:
        if field_name in kept:
            by_path.setdefault(where[field_name], []).append(field_name)
    try:
        for path, names in by_path.items():
            if not names:
                continue
            body: dict[str, Any] = {"__annotations__": {}, "__module__": cls.__module__}
            for field_name in names:
                f = declared[field_name]
                body["__annotations__"][field_name] = f.type
                is_hot, is_secret, accepts_inf = (field_name in marks[m] for m in ("hot", "secret", "nonfinite"))
                default = {"factory": f.factory} if f.factory is not None else {"default": f.default}
                body[field_name] = setting(**default, help=f.help, hot=is_hot, secret=is_secret, nonfinite=accepts_inf)
            # errors about a field name the user's class and the namespace, not a generated class
            schema.namespace(path)(type(f"{owner}[{path}]", (), body))
        schema._adopted = cls
        schema.freeze()
    except DeclarationError as exc:
        raise DeclarationError(f"adopting {kind} {owner}: {exc}") from None
    setattr(cls, SCHEMA_ATTR, schema)
    return schema


def from_dataclass(cls: type, *, namespaces: Mapping[str, Iterable[str]], **options: Any) -> Schema:
    """`adopt` for a dataclass (the first kind it took); raises DeclarationError for any other class."""
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise DeclarationError(
            f"from_dataclass() takes a dataclass type, got {cls!r} -- use sgconf.adopt() for other record classes"
        )
    return adopt(cls, namespaces=namespaces, **options)


__all__ = ["RecordField", "adopt", "from_dataclass", "record_fields"]
