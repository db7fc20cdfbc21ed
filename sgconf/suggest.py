"""Did-you-mean suggestions for unknown names."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """Return `" -- did you mean 'x'?"` for the closest candidate, or an empty string."""
    normalized = name.lower().replace("-", "_")
    matches = difflib.get_close_matches(normalized, list(candidates), n=1, cutoff=0.6)
    return f" -- did you mean '{matches[0]}'?" if matches else ""
