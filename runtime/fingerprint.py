"""The config fingerprint: a stable hash of the counted leaves in one canonical form.

Equal records must hash equal, in every process: `2` and `2.0`, `True` and `1`, a tuple
and a list, a read-only mapping and a dict compare equal, so they are written the same.
Each counted field is written once into a fragment and hashed with SHA-256; the digest
is the sum of those hashes modulo 2**256. A sum does not depend on order and takes one
field out or puts it back in constant time, so a commit costs what it touches: it
subtracts the hashes of the old values of its fields and adds those of the new, with no
per-field table kept and nothing walked that it did not change.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from json.encoder import encode_basestring_ascii  # type: ignore[attr-defined]
from typing import TYPE_CHECKING, Any

import attrs

from runtime.flatview import FlatView
from sgconf.twin import builder

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
        return {"set": sorted(json.dumps(canonical(v)) for v in value)}
    return {"repr": repr(value)}


_INTEGERS = (int, bool)
_quoted = encode_basestring_ascii  # json's own string writer (in C), as json.dumps writes a str


def fragment(name: str, value: Any) -> str:
    """`json.dumps([name, canonical(value)])`, compact and sorted; the common scalar leaves written without the walk."""
    kind = type(value)
    if kind in _INTEGERS:
        return f"[{_quoted(name)},{int(value)}]"
    if kind is str:
        return f"[{_quoted(name)},{_quoted(value)}]"
    if value is None:
        return f"[{_quoted(name)},null]"
    # every mapping canonical() writes has one key, so no key order is left to fix
    return json.dumps([name, canonical(value)], separators=(",", ":"))


_MOD = 1 << 256


def _term(name: str, value: Any) -> int:
    if type(value) in _SCALARS:
        return _scalar_term(name, value)
    return _hashed(fragment(name, value))


def _hashed(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest(), "big")


# the leaf types whose term is memoised, and whose equal values share one canonical form
_SCALARS = frozenset({int, bool, str, float, type(None)})


@functools.lru_cache(maxsize=4096)
def _scalar_term(name: str, value: Any) -> int:
    """The term of a scalar leaf, kept once hashed: a hot setting goes back and forth between a few values.

    Equal scalars share a key (`1`, `1.0`, `True`), which is right: they share one
    canonical fragment, so one term.
    """
    return _hashed(fragment(name, value))


def counted(schema: Declarations) -> frozenset[str]:
    """The fields of `schema` that count towards its fingerprint (declared `fingerprint=True`); cached per schema."""
    found = schema._cache.get("fingerprint_fields")
    if found is None:
        found = frozenset(name for name, info in schema._fields.items() if info.setting.fingerprint)
        schema._cache["fingerprint_fields"] = found
    return found  # type: ignore[no-any-return]


def _default_terms(schema: Declarations) -> dict[str, tuple[Any, int]]:
    """Counted field -> (its scalar default, that default's term), made once per schema: most fields of a large schema stay at it."""
    found = schema._cache.get("fingerprint_defaults")
    if found is None:
        names = counted(schema)
        # a field's default is frozen once at declaration, so a container default is one object every record shares
        found = {
            name: (info.default, _term(name, info.default))
            for name, info in schema._fields.items()
            if name in names and info.default is not attrs.NOTHING
        }
        schema._cache["fingerprint_defaults"] = found
    return found  # type: ignore[no-any-return]


@attrs.frozen(slots=True, eq=False)
class Fingerprint:
    """The sum of the counted fields' hashes and its hex digest; `changed()` moves it by one change in O(1)."""

    total: int
    counted: frozenset[str] = attrs.field(repr=False)

    @property
    def digest(self) -> str:
        return format(self.total, "064x")

    @classmethod
    def of(cls, flat: Mapping[str, Any], schema: Declarations) -> Fingerprint:
        """The fingerprint of the counted fields of `schema` in `flat`; a field at its scalar default costs no hashing."""
        names = counted(schema)
        defaults = _default_terms(schema)
        # a flat view reads every value at once through its C-level getters; one lookup each below
        values = flat.copy() if isinstance(flat, FlatView) else flat
        scalars = _SCALARS
        total = 0
        for name in names:
            value = values[name]
            known = defaults.get(name)
            if known is not None and (value is known[0] or (type(value) in scalars and value == known[0])):
                total += known[1]  # the default itself, or an equal scalar: equal scalars have one canonical form
            else:
                total += _term(name, value)
        return cls(total % _MOD, names)

    def changed(self, changes: Iterable[Any]) -> Fingerprint:
        """The fingerprint once each change (`.name`, `.old`, `.new`, old being the value counted now) is applied."""
        total = self.total
        for change in changes:
            if change.name in self.counted and change.old is not change.new:
                total += _term(change.name, change.new) - _term(change.name, change.old)
        total %= _MOD
        return self if total == self.total else _fingerprint(total, self.counted)


_fingerprint = builder(Fingerprint)  # one per commit of a counted field: no setattr call per field


def fingerprint_of(flat: Mapping[str, Any], schema: Declarations) -> str:
    """A hex digest over the counted leaves (declared `fingerprint=True`) of `schema`, in canonical form; see the module docstring."""
    return Fingerprint.of(flat, schema).digest


__all__ = ["Fingerprint", "canonical", "counted", "fingerprint_of"]
