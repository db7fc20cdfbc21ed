"""Did-you-mean suggestions for unknown names, ranked by edit distance and shared prefix.

A typo is usually one or two keystrokes off (`--tp-sise`, `pag_size`), and the start of a
name is what people get right: `--tp-sise` is `--tp-size`, not `--dp-size`, though both
are one edit away. Truncations count too (`--max-running` for `--max-running-requests`).
Distances are optimal-string-alignment distances from rapidfuzz: a swap of two
neighbouring characters is one edit, as it is one slip of the fingers.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from rapidfuzz.distance import OSA

# shortest typed name that may be completed as a truncation of a longer one
_MIN_PREFIX = 3


def _core(name: str) -> str:
    """The part of a name that carries meaning: no leading dashes, case folded."""
    return name.lstrip("-").lower()


def max_edits(name: str) -> int:
    """How many edits a typed name may be from a candidate: 1 for short names, up to a third of longer ones."""
    return max(1, len(_core(name)) // 3)


def rank(name: str, candidates: Iterable[str]) -> list[str]:
    """The candidates close enough to `name` to suggest, best first.

    Close enough: at most `max_edits(name)` edits away, or `name` is the start of the
    candidate (at least three characters). Ranked by edit distance, then by the
    length of the shared prefix (longer first), then truncations, shortest first.
    """
    typed = _core(name)
    limit = max_edits(name)
    scored: list[tuple[int, int, int, str]] = []
    for cand in dict.fromkeys(candidates):
        core = _core(cand)
        if not core:
            continue
        edits = OSA.distance(typed, core)
        if edits <= limit:
            scored.append((0, edits, -_shared_prefix(typed, core), cand))
        elif len(typed) >= _MIN_PREFIX and core.startswith(typed):
            scored.append((1, len(core) - len(typed), 0, cand))
    return [cand for *_, cand in sorted(scored)]


def _shared_prefix(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))


def did_you_mean(name: str, candidates: Iterable[str], *, normalize: bool = True) -> str:
    """Return `" -- did you mean 'x'?"` for the best-ranked candidate, or an empty string.

    `normalize` folds case and dashes to underscores first (field names); pass False
    when the candidates are spelled as shown (flags, env vars).
    """
    typed = name.lower().replace("-", "_") if normalize else name
    found = rank(typed, candidates)
    return f" -- did you mean '{found[0]}'?" if found else ""
