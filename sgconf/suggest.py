"""Did-you-mean suggestions for unknown names."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: str, candidates: Iterable[str], *, normalize: bool = True) -> str:
    """Return `" -- did you mean 'x'?"` for the closest candidate, or an empty string.

    `normalize` folds case and dashes to underscores first (field names); pass False
    when the candidates are spelled as shown (flags, env vars).
    """
    normalized = name.lower().replace("-", "_") if normalize else name
    matches = difflib.get_close_matches(normalized, list(candidates), n=1, cutoff=0.6)
    return f" -- did you mean '{matches[0]}'?" if matches else ""
