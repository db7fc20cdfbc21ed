"""`Plan`: what `fix` changes in one file, computed once and applied by either rewriter (text or libcst)."""

from __future__ import annotations

import attrs

from tools.ratchet.sites import FileScan, Site


@attrs.frozen(slots=True)
class Plan:
    """What to change: accessor text per node key, alias statements to drop, names to import."""

    replace: dict[tuple[str, int, int], str]
    remove: frozenset[tuple[int, int]]
    needed: frozenset[str]
    fixed: tuple[Site, ...]
    skipped: tuple[tuple[Site, str], ...]
    review: tuple[tuple[Site, str], ...] = ()
    #: the span each replaced expression covers: ((line, col), (end line, end col)), 0-based columns
    spans: dict[tuple[str, int, int], tuple[tuple[int, int], tuple[int, int]]] = attrs.field(factory=dict)
    #: (kind, field) of every access the plan leaves in place, counted or not
    left: tuple[tuple[str, str], ...] = ()
    #: the file's scan, as `check` sees it (so `fix` can fill the scan cache)
    scan: FileScan | None = None


__all__ = ["Plan"]
