"""The record's other names in the scanned tree: subclasses, aliases and renaming imports.

Code bases derive their own record classes (`class PortArgs(ServerArgs)`), alias them
(`Args = ServerArgs`, `type Args = ServerArgs`, `Args: TypeAlias = ServerArgs`) and
import them under other names (`from sgconf import ServerArgs as SA`); a parameter
annotated with any of those holds the record just the same. This pass finds them over
the whole configured tree (a subclass declared in one file is used in another), until no
new name turns up, so `check` of one file knows what the project knows.

It reads text, not trees: a cheap pass that a cold `check` pays for once, and that
never fails on a file the parsers refuse.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_CLASS = re.compile(r"^[ \t]*class[ \t]+(\w+)[ \t]*(?:\[[^\]]*\])?[ \t]*\(([^)]*)\)[ \t]*:", re.M)
_ALIAS = re.compile(
    r"^[ \t]*(?:type[ \t]+)?(\w+)[ \t]*(?:\[[^\]\n]*\])?[ \t]*(?::[ \t]*(?:[\w.]+\.)?TypeAlias[ \t]*)?="
    r"[ \t]*(?:[\w.]+\.)?(\w+)[ \t]*(?:#.*)?$",
    re.M,
)
_IMPORT_AS = re.compile(r"^[ \t]*from[ \t]+[\w.]+[ \t]+import[ \t]*\(?([^)#\n]*(?:\n[^)#]*)*)\)?", re.M)
_AS = re.compile(r"\b(\w+)[ \t]+as[ \t]+(\w+)\b")
_WORD = re.compile(r"\w+")


def _derived(text: str, known: set[str]) -> set[str]:
    found: set[str] = set()
    for match in _CLASS.finditer(text):
        if not known.isdisjoint(_WORD.findall(match.group(2))):
            found.add(match.group(1))
    for match in _ALIAS.finditer(text):
        if match.group(2) in known:
            found.add(match.group(1))
    for match in _IMPORT_AS.finditer(text):
        for original, alias in _AS.findall(match.group(1)):
            if original in known:
                found.add(alias)
    return found - known


def record_types(texts: Iterable[str], seeds: Iterable[str]) -> frozenset[str]:
    """The seed names plus every subclass, alias and import rename of them in `texts`, transitively."""
    known = set(seeds)
    candidates = list(texts)
    while True:
        new: set[str] = set()
        for text in candidates:
            if any(name in text for name in known):
                new |= _derived(text, known)
        if not new:
            return frozenset(known)
        known |= new
