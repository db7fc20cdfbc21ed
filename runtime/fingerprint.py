"""The config fingerprint: a stable hash of the counted leaves in one canonical form.

Equal records must hash equal, in every process: `2` and `2.0`, `True` and `1`, a tuple
and a list, a read-only mapping and a dict compare equal, so they are written the same.
Each counted field is written once into a fragment; a commit rewrites only the
fragments of the fields it touched, then hashes the sorted fragments.
"""

from __future__ import annotations

import hashlib
import json
import math
import types
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from sgconf.declarations import Declarations


def canonical(value: Any) -> Any:
    """`value` as plain JSON data in one form per equality class (numbers, containers)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer():
            return int(value)
        return repr(value)  # a non-integral float: repr is exact and round-trips
    if isinstance(value, Mapping):
        return {"{}": sorted([str(k), canonical(v)] for k, v in value.items())}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return {"set": sorted(json.dumps(canonical(v), sort_keys=True) for v in value)}
    return {"repr": repr(value)}


def fragment(name: str, value: Any) -> str:
    return json.dumps([name, canonical(value)], sort_keys=True, separators=(",", ":"))


def _counted(schema: Declarations) -> frozenset[str]:
    return frozenset(name for name, info in schema._fields.items() if info.setting.fingerprint)


@attrs.frozen(slots=True, eq=False)
class Fingerprint:
    """The fragments of one set of values and their SHA-256; `updated()` rewrites only what changed."""

    parts: types.MappingProxyType[str, str]
    digest: str

    @classmethod
    def of(cls, flat: Mapping[str, Any], schema: Declarations) -> Fingerprint:
        """The fingerprint of the counted fields of `schema` in `flat`."""
        counted = _counted(schema)
        parts = {name: fragment(name, flat[name]) for name in sorted(counted)}
        return cls(types.MappingProxyType(parts), _hash(parts))

    def updated(self, flat: Mapping[str, Any], names: Iterable[str]) -> Fingerprint:
        parts = None
        for name in names:
            if name not in self.parts:
                continue  # not counted
            new = fragment(name, flat[name])
            if new != self.parts[name]:
                if parts is None:
                    parts = dict(self.parts)
                parts[name] = new
        if parts is None:
            return self
        return Fingerprint(types.MappingProxyType(parts), _hash(parts))


def _hash(parts: Mapping[str, str]) -> str:
    # `of` builds the parts in sorted order and `updated` keeps it, so no sort here
    text = "[" + ",".join(parts.values()) + "]"
    return hashlib.sha256(text.encode()).hexdigest()


def fingerprint_of(flat: Mapping[str, Any], schema: Declarations) -> str:
    """SHA-256 over the counted leaves (declared `fingerprint=True`) of `schema`, sorted by name, in canonical form."""
    return Fingerprint.of(flat, schema).digest


__all__ = ["Fingerprint", "canonical", "fingerprint_of"]
