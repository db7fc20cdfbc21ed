"""`from_dataclass`: a schema built from an existing dataclass record, for a runtime that already has one.

A code base with an argparse + `@dataclass class ServerArgs` can adopt sgconf in steps:
build a schema from the dataclass (its field types, defaults and `metadata["help"]`
kept as they are), publish the instances its own argparse builds, move its readers to
accessors (the read ratchet counts what is left), and only then move its loading to
`schema.load`.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from sgconf.errors import DeclarationError
from sgconf.fields import setting
from sgconf.schema import SCHEMA_ATTR, Schema
from sgconf.suggest import did_you_mean


def from_dataclass(
    cls: type,
    *,
    namespaces: Mapping[str, Iterable[str]],
    others: str | None = None,
    hot: Iterable[str] = (),
    secret: Iterable[str] = (),
    name: str | None = None,
    env_prefix: str | None = None,
    record_name: str | None = None,
) -> Schema:
    """A frozen schema with one namespace per entry of `namespaces` (`{"lora": ["max_loras", ...]}`).

    Fields not listed go to the namespace `others` (an error when None); `hot` and
    `secret` mark fields as such. Publishing an instance of `cls` converts it to the
    schema's record (each value checked by the schema's converter). Raises
    DeclarationError for a class that is not a dataclass, a field listed twice or not at
    all, an unknown name, or a field without a default.
    """
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise DeclarationError(f"from_dataclass() takes a dataclass type, got {cls!r} -- decorate it with @dataclass")
    declared = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    where: dict[str, str] = {}
    for path, names in namespaces.items():
        for field_name in names:
            if field_name not in declared:
                msg = f"namespace {path!r} lists {field_name!r}, which {cls.__name__} does not have{did_you_mean(field_name, declared)}"
                raise DeclarationError(msg)
            if field_name in where:
                raise DeclarationError(f"field {field_name!r} of {cls.__name__} is listed in both {where[field_name]!r} and {path!r}")
            where[field_name] = path
    rest = [n for n in declared if n not in where]
    if rest and others is None:
        msg = f"fields of {cls.__name__} not in any namespace: {', '.join(rest)} -- list them, or pass others='<namespace>'"
        raise DeclarationError(msg)
    for field_name in rest:
        where[field_name] = others  # type: ignore[assignment]
    marks = {"hot": set(hot), "secret": set(secret)}
    for kind, names_ in marks.items():
        unknown = sorted(names_ - set(declared))
        if unknown:
            raise DeclarationError(f"{kind}= names {', '.join(map(repr, unknown))}, not fields of {cls.__name__}")

    schema = Schema(name or cls.__name__.lower(), env_prefix=env_prefix, record_name=record_name or cls.__name__)
    # namespaces in the order the call lists them, `others` last; fields in the dataclass's order
    by_path: dict[str, list[str]] = {path: [] for path in namespaces}
    for field_name in declared:
        by_path.setdefault(where[field_name], []).append(field_name)
    by_path = {path: names for path, names in by_path.items() if names}
    for path, names in by_path.items():
        body: dict[str, Any] = {"__annotations__": {}, "__module__": cls.__module__}
        for field_name in names:
            f = declared[field_name]
            body["__annotations__"][field_name] = hints.get(field_name, Any)
            body[field_name] = _setting(cls, f, hot=field_name in marks["hot"], secret=field_name in marks["secret"])
        class_name = "".join(part.capitalize() for part in path.split(".")) + "Config"
        schema.namespace(path)(type(class_name, (), body))
    schema._adopted = cls
    schema.freeze()
    setattr(cls, SCHEMA_ATTR, schema)
    return schema


def _setting(cls: type, f: dataclasses.Field[Any], *, hot: bool, secret: bool) -> Any:
    help_text = str(f.metadata.get("help") or f.name.replace("_", " "))
    if f.default is not dataclasses.MISSING:
        return setting(f.default, help=help_text, hot=hot, secret=secret)
    if f.default_factory is not dataclasses.MISSING:
        return setting(f.default_factory(), help=help_text, hot=hot, secret=secret)
    msg = f"field {f.name!r} of {cls.__name__} has no default -- every setting needs one; give it a default in the dataclass"
    raise DeclarationError(msg)


__all__ = ["from_dataclass"]
