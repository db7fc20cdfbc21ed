"""`Snapshot`: every config bag of the published schema at one generation, plus the values derived from them.

A snapshot is immutable. Code that reads several values for one decision (pool sizing,
a forward pass) takes one snapshot and reads everything from it, so an override landing
in between cannot hand it half of the old config and half of the new.

Each schema gets its own snapshot class, made when it is first published: one attribute
per top-level namespace of that schema (`snap.schedule`, `snap.lora`) and one method per
derived value it declares (`snap.max_speculative_num_draft_tokens()`). Nothing here
lists namespace names; they come from the schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from runtime import fingerprint as _fingerprint
from runtime.errors import MissingNamespaceError
from sgconf.record import bags_to_flat

if TYPE_CHECKING:
    from sgconf.hooks import Derived
    from sgconf.schema import Schema


class Snapshot:
    """All bags at one `generation`; attribute names match the accessors (`snap.schedule` ~ `get_schedule()`).

    The base of every schema's snapshot class (`snapshot_class(schema)`); `isinstance(x, Snapshot)` holds for all.
    """

    __slots__ = ()
    schema: ClassVar[Schema]
    bag_names: ClassVar[tuple[str, ...]] = ()
    generation: int

    @classmethod
    def from_bags(cls, generation: int, bags: Mapping[str, Any]) -> Snapshot:
        """A snapshot of this class's schema (call it on `snapshot_class(schema)`) from its top-level bags."""
        if cls is Snapshot:
            raise TypeError("Snapshot.from_bags() needs a schema's class -- call snapshot_class(schema).from_bags(...)")
        target = cls
        return target(generation, **{name: bags[name] for name in target.bag_names})  # type: ignore[call-arg]

    def bags(self) -> dict[str, Any]:
        """The top-level bags by namespace name (a fresh dict; the bags themselves are immutable)."""
        return {name: getattr(self, name) for name in self.bag_names}

    def flat(self) -> dict[str, Any]:
        """Every leaf as `{field: value}`."""
        return bags_to_flat(self.bags(), self.schema)

    def fingerprint(self) -> str:
        """Stable hex hash of the counted leaves; see `fingerprint_of`."""
        return fingerprint_of(self.flat(), self.schema)

    if TYPE_CHECKING:
        # the bags are made per schema, so to a type checker any namespace attribute is allowed;
        # at run time there is no `__getattr__`, which would slow every read down
        def __getattr__(self, name: str) -> Any: ...


def missing_namespace(schema: Schema, name: str) -> AttributeError:
    """The error for reading `name` from a view of `schema`: a clear message when it looks like a namespace."""
    if name.startswith("_"):
        return AttributeError(name)
    tops = ", ".join(schema.top_level_namespaces())
    msg = (
        f"the published schema {schema.name!r} has no namespace {name!r} (get_{name}()); it has: {tops} "
        f"-- read a namespace of that schema, or publish a record of a schema that declares {name!r}"
    )
    return MissingNamespaceError(msg)


def derived_method(name: str, value: Derived) -> Any:
    """`value` as a method named `name` of a snapshot class, or of a view that stands in for one."""
    compute = value.compute

    def method(self: Any) -> Any:
        return compute(self)

    method.__name__ = name
    method.__doc__ = value.doc
    return method


def snapshot_class(schema: Schema) -> type[Snapshot]:
    """The snapshot class of `schema` (frozen first): one attribute per top-level bag, one method per derived value."""
    schema.freeze()
    found = schema._cache.get("snapshot_class")
    if found is None:
        names = tuple(schema.top_level_namespaces())
        attributes: dict[str, Any] = {"generation": attrs.field()}
        attributes.update({name: attrs.field(type=schema.namespace_class(name)) for name in names})
        cls: Any = attrs.make_class(
            "Snapshot", attributes, bases=(Snapshot,), frozen=True, slots=True, weakref_slot=False
        )
        cls.schema = schema
        cls.bag_names = names
        cls.__module__ = __name__
        for name, fn in schema.derived_values().items():
            setattr(cls, name, derived_method(name, fn))
        schema._cache["snapshot_class"] = found = cls
    return found  # type: ignore[no-any-return]


def fingerprint_of(flat: Mapping[str, Any], schema: Schema) -> str:
    """SHA-256 over the counted leaves of `schema` in canonical form; see `runtime.fingerprint`."""
    return _fingerprint.fingerprint_of(flat, schema)


__all__ = ["MissingNamespaceError", "Snapshot", "fingerprint_of", "missing_namespace", "snapshot_class"]
