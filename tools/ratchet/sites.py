"""The values a scan produces: counted sites, allow comments and per-file results.

Everything here is a frozen value that survives a JSON round trip, because scan results
are cached by content hash and shipped back from worker processes.
"""

from __future__ import annotations

from typing import Any

import attrs

#: Every kind of raw access, in the order reports list them.
KINDS: tuple[str, ...] = ("direct", "alias", "attribute", "parameter", "getattr", "computed", "write")


@attrs.frozen(slots=True)
class Site:
    """One raw read (or write) of a record field; `line` and `col` are 1-based."""

    path: str
    line: int
    col: int
    kind: str
    field: str
    #: the reason of a same-line `# ratchet: allow(...)` comment; such a site is not counted
    allowed: str | None = None

    def to_row(self) -> list[Any]:
        return [self.line, self.col, self.kind, self.field, self.allowed]

    @classmethod
    def from_row(cls, path: str, row: list[Any]) -> Site:
        line, col, kind, field, allowed = row
        return cls(path, int(line), int(col), str(kind), str(field), allowed)


@attrs.frozen(slots=True)
class AllowComment:
    """A `# ratchet: allow(<reason>)` comment; `reason` is empty when it was left out."""

    path: str
    line: int
    col: int
    reason: str
    #: whether a read sits on the same line (an unused comment is stale)
    used: bool

    def to_row(self) -> list[Any]:
        return [self.line, self.col, self.reason, self.used]

    @classmethod
    def from_row(cls, path: str, row: list[Any]) -> AllowComment:
        line, col, reason, used = row
        return cls(path, int(line), int(col), str(reason), bool(used))


@attrs.frozen(slots=True)
class FileScan:
    """What one file holds; `error` is set (and the rest empty) when it could not be read or parsed."""

    path: str
    sites: tuple[Site, ...] = ()
    allows: tuple[AllowComment, ...] = ()
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"sites": [s.to_row() for s in self.sites], "allows": [a.to_row() for a in self.allows]}

    @classmethod
    def from_json(cls, path: str, data: dict[str, Any]) -> FileScan:
        sites = tuple(Site.from_row(path, row) for row in data["sites"])
        allows = tuple(AllowComment.from_row(path, row) for row in data["allows"])
        return cls(path, sites, allows)
