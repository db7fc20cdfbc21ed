"""Comparing observed counts with the baseline, tightening it, and writing it back.

The baseline may only go down: `check` fails on any (file, kind) count above it and on
counts below it that `update` has not locked in yet; `update` lowers counts and drops
zero entries, and raises one only with `allow_increase` and a reason written beside it.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs

from tools import toml as tomllib
from tools.ratchet.config import Exempt, RatchetConfig, exempt_entry
from tools.ratchet.errors import BaselineRefused, RatchetConfigError
from tools.ratchet.sites import KINDS, AllowComment, FileScan, Site

Counts = dict[str, dict[str, int]]

COUNTS_MARKER = "# Raw reads per file and kind, written by `sgconf-ratchet update`; keep this section last."


@attrs.frozen(slots=True)
class Regression:
    """A (file, kind) count above its baseline, with every counted site of that kind in the file."""

    path: str
    kind: str
    baseline: int
    observed: int
    sites: tuple[Site, ...]


@attrs.frozen(slots=True)
class Progress:
    """A file whose counts fell below the baseline; `kinds` holds `(kind, baseline, observed)`."""

    path: str
    kinds: tuple[tuple[str, int, int], ...]

    @property
    def fixed(self) -> int:
        return sum(b - o for _, b, o in self.kinds)


@attrs.frozen(slots=True)
class Outcome:
    """Everything `check` found; `exit_code` is 2 on read/parse errors, 1 on any violation, else 0."""

    scans: tuple[FileScan, ...]
    counted: tuple[Site, ...]
    regressions: tuple[Regression, ...] = ()
    progress: tuple[Progress, ...] = ()
    stale_allows: tuple[AllowComment, ...] = ()
    missing_reasons: tuple[AllowComment, ...] = ()
    stale_exempts: tuple[Exempt, ...] = ()

    @property
    def errors(self) -> tuple[FileScan, ...]:
        return tuple(s for s in self.scans if s.error is not None)

    @property
    def violations(self) -> int:
        return (
            len(self.regressions)
            + len(self.progress)
            + len(self.stale_allows)
            + len(self.missing_reasons)
            + len(self.stale_exempts)
        )

    @property
    def exit_code(self) -> int:
        if self.errors:
            return 2
        return 1 if self.violations else 0


def exempt_for(config: RatchetConfig, site: Site) -> Exempt | None:
    """The exemption covering `site`; writes are never exempt."""
    return exempt_entry(config.exempt, site.path, site.kind, site.field)


def counted_sites(config: RatchetConfig, scans: Iterable[FileScan]) -> list[Site]:
    """Sites that count against the baseline: neither allowed by a comment nor exempt."""
    return [s for scan in scans for s in scan.sites if s.allowed is None and exempt_for(config, s) is None]


def observed_counts(sites: Iterable[Site]) -> Counts:
    out: Counts = {}
    for site in sites:
        per_kind = out.setdefault(site.path, {})
        per_kind[site.kind] = per_kind.get(site.kind, 0) + 1
    return out


def _considered(config: RatchetConfig, scans: Sequence[FileScan], full: bool) -> list[str]:
    paths = {s.path for s in scans}
    if full:
        paths |= set(config.counts)
    return sorted(paths)


def compare(config: RatchetConfig, scans: Sequence[FileScan], *, full: bool) -> Outcome:
    """Compare `scans` with the baseline; `full` means every configured file was scanned.

    Only a full run can tell that a baselined file is gone or that an exemption is stale.
    """
    counted = counted_sites(config, scans)
    observed = observed_counts(counted)
    regressions: list[Regression] = []
    progress: list[Progress] = []
    for path in _considered(config, scans, full):
        base = config.counts.get(path, {})
        seen = observed.get(path, {})
        dropped = []
        for kind in KINDS:
            b, o = base.get(kind, 0), seen.get(kind, 0)
            if o > b:
                sites = tuple(s for s in counted if s.path == path and s.kind == kind)
                regressions.append(Regression(path, kind, b, o, sites))
            elif o < b:
                dropped.append((kind, b, o))
        if dropped:
            progress.append(Progress(path, tuple(dropped)))
    allows = [a for scan in scans for a in scan.allows]
    stale = tuple(a for a in allows if a.reason and not a.used)
    missing = tuple(a for a in allows if not a.reason)
    stale_exempts: tuple[Exempt, ...] = ()
    if full:
        all_sites = [s for scan in scans for s in scan.sites if s.allowed is None and s.kind != "write"]
        stale_exempts = tuple(e for e in config.exempt if not any(e.covers(s.path, s.field) for s in all_sites))
    return Outcome(tuple(scans), tuple(counted), tuple(regressions), tuple(progress), stale, missing, stale_exempts)


def updated_counts(
    config: RatchetConfig,
    scans: Sequence[FileScan],
    *,
    full: bool,
    allow_increase: bool = False,
) -> tuple[Counts, list[tuple[str, str, int, int]]]:
    """The tightened baseline and the increases it holds `(path, kind, old, new)`.

    Raises BaselineRefused when a count would rise and `allow_increase` is not set.
    """
    observed = observed_counts(counted_sites(config, scans))
    counts: Counts = {path: dict(kinds) for path, kinds in config.counts.items()}
    increases = []
    for path in _considered(config, scans, full):
        base = config.counts.get(path, {})
        seen = observed.get(path, {})
        for kind in KINDS:
            if seen.get(kind, 0) > base.get(kind, 0):
                increases.append((path, kind, base.get(kind, 0), seen[kind]))
        counts[path] = {k: v for k, v in seen.items() if v}
    if increases and not allow_increase:
        raise BaselineRefused(refusal_message(increases, first=not config.counts))
    return {p: c for p, c in counts.items() if c}, increases


#: how many rising counts a refusal lists before "and N more"; keeps it under 2 KB
REFUSAL_LINES = 10


def refusal_message(increases: Sequence[tuple[str, str, int, int]], *, first: bool) -> str:
    """Why `update` refused: the rising counts, grouped by file, the first few only, then what to do."""
    per_file: dict[str, list[tuple[str, int, int]]] = {}
    for path, kind, old, new in increases:
        per_file.setdefault(path, []).append((kind, old, new))
    total = sum(new - old for _, _, old, new in increases)
    lines = [f"update refuses to raise the baseline: {total} more counted site(s) in {len(per_file)} file(s)"]
    for path in sorted(per_file)[:REFUSAL_LINES]:
        kinds = ", ".join(f"{kind} {old} \u2192 {new}" for kind, old, new in per_file[path])
        lines.append(f"  {path[-120:]}: {kinds}")
    if len(per_file) > REFUSAL_LINES:
        lines.append(f"  and {len(per_file) - REFUSAL_LINES} more file(s)")
    if first:
        lines.append("-- this code base has no baseline yet: write the first one with `sgconf-ratchet init`")
    else:
        lines.append(
            "-- fix the reads, or accept the rise with `sgconf-ratchet update --allow-increase --reason '<why>'`"
        )
    return "\n".join(lines)


def _toml_string(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def render_counts(counts: Counts, reasons: dict[str, str]) -> str:
    """The counts section: sorted by path, kinds in `KINDS` order, so diffs and merges stay small."""
    lines = [COUNTS_MARKER]
    for path in sorted(counts):
        lines.append("")
        lines.append(f"[counts.{_toml_string(path)}]")
        for kind in KINDS:
            if counts[path].get(kind):
                lines.append(f"{kind} = {counts[path][kind]}")
        if path in reasons:
            lines.append(f"reason = {_toml_string(reasons[path])}")
    return "\n".join(lines) + "\n"


_COUNTS_START = re.compile(r"^\s*\[\s*counts\s*[.\]]", re.MULTILINE)


def write_counts(config_file: Path, counts: Counts, reasons: dict[str, str]) -> None:
    """Replace the counts section (from the marker or first `[counts.` header to the end).

    Everything above it (`[config]`, `[[exempt]]`, comments) is kept byte for byte; the
    file is replaced atomically. Raises RatchetConfigError, writing nothing, when other
    tables follow the counts (they would be lost) or the file cannot be written.
    """
    try:
        text = config_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RatchetConfigError(f"cannot read {config_file}: {exc}") from None
    cut = text.find(COUNTS_MARKER)
    if cut < 0:
        match = _COUNTS_START.search(text)
        cut = match.start() if match else len(text)
    try:
        after = set(tomllib.loads(text[cut:])) - {"counts"}
    except tomllib.TOMLDecodeError:
        after = {"?"}
    if after:
        tables = ", ".join(sorted(after))
        msg = f"{config_file.name} has other tables after the counts section ({tables}); update would drop them"
        raise RatchetConfigError(msg + ' -- move [config] and [[exempt]] above the first [counts."..."] table')
    head = text[:cut].rstrip()
    kept = {p: r for p, r in reasons.items() if p in counts}
    body = render_counts(counts, kept)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{config_file.name}.", dir=config_file.parent)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write((head + "\n\n" if head else "") + body)
        os.chmod(tmp, stat.S_IMODE(config_file.stat().st_mode))
        os.replace(tmp, config_file)
    except OSError as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise RatchetConfigError(
            f"cannot write {config_file}: {exc.strerror or exc} -- check its permissions"
        ) from None
