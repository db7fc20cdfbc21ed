"""What a mutation run found: per-module counts and score, and every surviving mutant."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from tools.mutation.config import Equivalent
from tools.mutation.mutants import Mutant


@attrs.frozen(slots=True)
class ModuleSummary:
    """The outcome of every mutant of one module.

    The score is the share of judged mutants that the tests killed (a timeout counts
    as killed: the mutant hung the tests); known equivalents are not judged.
    """

    path: str
    killed: int
    timed_out: int
    survivors: tuple[Mutant, ...]
    equivalent: int
    not_compiled: int = 0
    seconds: float = 0.0

    @property
    def judged(self) -> int:
        return self.killed + self.timed_out + len(self.survivors)

    @property
    def total(self) -> int:
        return self.judged + self.equivalent

    @property
    def score(self) -> float:
        return 100.0 * (self.killed + self.timed_out) / self.judged if self.judged else 100.0

    def line(self) -> str:
        return (
            f"{self.path}: {self.total} mutants, {self.killed} killed, {self.timed_out} timed out, "
            f"{len(self.survivors)} survived, {self.equivalent} equivalent: {self.score:.1f}% killed ({self.seconds:.0f} s)"
        )


_HEADER = ("module", "mutants", "killed", "timeout", "survived", "equivalent", "killed %")


def render(
    summaries: Sequence[ModuleSummary],
    *,
    threshold: float,
    stale: Sequence[Equivalent] = (),
    not_equivalent: Sequence[Mutant] = (),
    equivalents_name: str = "the equivalents file",
) -> str:
    """The report: a table, then survivors (`path:line scope: before -> after`), then notes on the equivalents file."""
    rows = [
        (
            s.path,
            str(s.total),
            str(s.killed),
            str(s.timed_out),
            str(len(s.survivors)),
            str(s.equivalent),
            f"{s.score:.1f}",
        )
        for s in summaries
    ]
    if len(summaries) > 1:
        killed = sum(s.killed for s in summaries)
        timed_out = sum(s.timed_out for s in summaries)
        judged = sum(s.judged for s in summaries)
        rows.append(
            (
                "total",
                str(sum(s.total for s in summaries)),
                str(killed),
                str(timed_out),
                str(sum(len(s.survivors) for s in summaries)),
                str(sum(s.equivalent for s in summaries)),
                f"{100.0 * (killed + timed_out) / judged if judged else 100.0:.1f}",
            )
        )
    widths = [max(len(r[i]) for r in [_HEADER, *rows]) for i in range(len(_HEADER))]
    lines = []
    for row in [_HEADER, *rows]:
        cells = [row[0].ljust(widths[0])] + [cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join(cells).rstrip())
    survivors = [m for s in summaries for m in s.survivors]
    if survivors:
        lines += ["", f"survivors ({len(survivors)}):"]
        lines += [f"  {m.location()}" for m in survivors]
    if not_equivalent:
        lines += ["", f"listed in {equivalents_name} but killed (remove the entry):"]
        lines += [f"  {m.location()}" for m in not_equivalent]
    if stale:
        lines += ["", f"entries of {equivalents_name} that name no mutant (the code changed; update or remove them):"]
        lines += [f"  line {e.line}: {e.text}" for e in stale]
    below = [s.path for s in summaries if s.score < threshold]
    lines.append("")
    if below:
        lines.append(f"below {threshold:g}% killed: {', '.join(below)}")
    else:
        lines.append(f"every module at or above {threshold:g}% killed")
    not_compiled = sum(s.not_compiled for s in summaries)
    if not_compiled:
        lines.append(f"({not_compiled} mutants did not compile and were left out)")
    return "\n".join(lines)


__all__ = ["ModuleSummary", "render"]
