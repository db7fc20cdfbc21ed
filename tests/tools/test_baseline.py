"""The baseline arithmetic: what `check` counts as a violation, what `update` may lower or refuses to raise, and the write."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from tools.ratchet.baseline import (
    COUNTS_MARKER,
    Outcome,
    Progress,
    compare,
    counted_sites,
    exempt_for,
    observed_counts,
    refusal_message,
    render_counts,
    updated_counts,
    write_counts,
)
from tools.ratchet.config import Exempt, RatchetConfig
from tools.ratchet.errors import BaselineRefused, RatchetConfigError
from tools.ratchet.sites import AllowComment, FileScan, Site


def site(path: str, kind: str = "direct", field: str = "page_size", line: int = 1, allowed: str | None = None) -> Site:
    return Site(path, line, 1, kind, field, allowed)


def config(
    tmp_path: Path, counts: dict[str, dict[str, int]] | None = None, exempt: tuple[Exempt, ...] = ()
) -> RatchetConfig:
    return RatchetConfig(file=tmp_path / "ratchet.toml", counts=counts or {}, exempt=exempt)


def test_counted_sites_skip_allowed_and_exempt_but_never_writes(tmp_path: Path) -> None:
    """An allow comment or an exemption takes a read out of the count; a write always counts."""
    cfg = config(tmp_path, exempt=(Exempt("a.py", "page_size", "legacy"),))
    read, allowed, write, other = (
        site("a.py"),
        site("a.py", allowed="why"),
        site("a.py", "write"),
        site("a.py", field="tp_size"),
    )
    assert exempt_for(cfg, read) == Exempt("a.py", "page_size", "legacy")
    assert exempt_for(cfg, write) is None and exempt_for(cfg, other) is None
    assert counted_sites(cfg, [FileScan("a.py", (read, allowed, write, other))]) == [write, other]
    assert observed_counts([write, other, site("b.py", "alias"), site("b.py", "alias")]) == {
        "a.py": {"write": 1, "direct": 1},
        "b.py": {"alias": 2},
    }


def test_compare_counts_a_regression_and_unlocked_progress_as_two_violations(tmp_path: Path) -> None:
    """One count above its baseline and one below it that update has not locked in: two violations, exit 1."""
    cfg = config(tmp_path, {"a.py": {"direct": 1}, "b.py": {"alias": 2, "direct": 1}})
    scans = [FileScan("a.py", (site("a.py"), site("a.py", line=2))), FileScan("b.py", (site("b.py", "alias"),))]
    out = compare(cfg, scans, full=False)
    [regression] = out.regressions
    assert (regression.path, regression.kind, regression.baseline, regression.observed) == ("a.py", "direct", 1, 2)
    assert regression.sites == scans[0].sites
    assert out.progress == (Progress("b.py", (("direct", 1, 0), ("alias", 2, 1))),)
    assert out.progress[0].fixed == 2
    assert (out.violations, out.exit_code) == (2, 1)


def test_compare_equal_counts_are_clean(tmp_path: Path) -> None:
    """Counts equal to the baseline are neither regressions nor progress."""
    cfg = config(tmp_path, {"a.py": {"direct": 1}})
    out = compare(cfg, [FileScan("a.py", (site("a.py"),))], full=False)
    assert (out.regressions, out.progress, out.violations, out.exit_code) == ((), (), 0, 0)


def test_compare_new_file_regresses_from_zero(tmp_path: Path) -> None:
    """A file without a baseline entry regresses from 0 at its first counted read."""
    out = compare(config(tmp_path), [FileScan("new.py", (site("new.py", "getattr"),))], full=False)
    assert [(r.path, r.kind, r.baseline, r.observed) for r in out.regressions] == [("new.py", "getattr", 0, 1)]


def test_only_a_full_run_sees_gone_files_and_stale_exemptions(tmp_path: Path) -> None:
    """A baselined file that was not scanned is progress only in a full run; so is an unused exemption stale."""
    unused = Exempt("gone.py", "*", "old")
    used = Exempt("a.py", "page_size", "kept")
    cfg = config(tmp_path, {"gone.py": {"direct": 1}}, exempt=(unused, used))
    scans = [FileScan("a.py", (site("a.py"), site("a.py", "write")))]
    partial = compare(cfg, scans, full=False)
    assert (partial.progress, partial.stale_exempts) == ((), ())
    full = compare(cfg, scans, full=True)
    assert full.progress == (Progress("gone.py", (("direct", 1, 0),)),)
    assert full.stale_exempts == (unused,)
    assert full.violations == 3  # the write counts, gone.py fell, one stale exemption


def test_allow_comments_stale_and_without_reason(tmp_path: Path) -> None:
    """An unused allow comment is stale; one without a reason is a violation of its own."""
    stale = AllowComment("a.py", 1, 5, "old reason", used=False)
    missing = AllowComment("a.py", 2, 5, "", used=True)
    fine = AllowComment("a.py", 3, 5, "reason", used=True)
    out = compare(config(tmp_path), [FileScan("a.py", allows=(stale, missing, fine))], full=False)
    assert (out.stale_allows, out.missing_reasons, out.violations, out.exit_code) == ((stale,), (missing,), 2, 1)


def test_unreadable_files_exit_2(tmp_path: Path) -> None:
    """A scan error is exit 2 whatever else was found."""
    out = compare(config(tmp_path), [FileScan("bad.py", error="cannot parse")], full=False)
    assert out.errors == (FileScan("bad.py", error="cannot parse"),)
    assert out.exit_code == 2
    assert Outcome((), (), ()).exit_code == 0


def test_update_lowers_and_drops_zero_entries(tmp_path: Path) -> None:
    """Counts fall to what is observed; a file or kind that reached 0 leaves the baseline; unscanned files stay."""
    cfg = config(tmp_path, {"a.py": {"direct": 3, "alias": 1}, "b.py": {"direct": 1}, "c.py": {"direct": 2}})
    scans = [FileScan("a.py", (site("a.py"),)), FileScan("b.py")]
    assert updated_counts(cfg, scans, full=False) == ({"a.py": {"direct": 1}, "c.py": {"direct": 2}}, [])
    assert updated_counts(cfg, scans, full=True) == ({"a.py": {"direct": 1}}, [])


def test_update_refuses_any_rise_even_from_zero(tmp_path: Path) -> None:
    """A new (file, kind) going from 0 to 1 is a rise: refused unless allowed, then reported."""
    cfg = config(tmp_path, {"a.py": {"direct": 1}})
    scans = [FileScan("a.py", (site("a.py"), site("a.py", "alias")))]
    with pytest.raises(BaselineRefused) as info:
        updated_counts(cfg, scans, full=False)
    assert str(info.value).splitlines()[:2] == [
        "update refuses to raise the baseline: 1 more counted site(s) in 1 file(s)",
        "  a.py: alias 0 \u2192 1",
    ]
    counts, increases = updated_counts(cfg, scans, full=False, allow_increase=True)
    assert (counts, increases) == ({"a.py": {"direct": 1, "alias": 1}}, [("a.py", "alias", 0, 1)])
    with pytest.raises(BaselineRefused):
        updated_counts(cfg, [FileScan("a.py", (site("a.py"), site("a.py", line=2)))], full=False)


def test_refusal_message_lists_the_first_files_and_the_fix() -> None:
    """Rises are grouped by file, totalled, cut after ten files, and end with what to do."""
    increases = [(f"f{i:02}.py", "direct", 0, 2) for i in range(12)] + [("f00.py", "alias", 1, 2)]
    lines = refusal_message(increases, first=False).splitlines()
    assert lines[0] == "update refuses to raise the baseline: 25 more counted site(s) in 12 file(s)"
    assert lines[1] == "  f00.py: direct 0 \u2192 2, alias 1 \u2192 2"
    assert lines[10] == "  f09.py: direct 0 \u2192 2"
    assert lines[11] == "  and 2 more file(s)"
    assert (
        lines[12]
        == "-- fix the reads, or accept the rise with `sgconf-ratchet update --allow-increase --reason '<why>'`"
    )
    assert len(lines) == 13
    first = refusal_message([("a.py", "direct", 0, 1)], first=True).splitlines()
    assert first == [
        "update refuses to raise the baseline: 1 more counted site(s) in 1 file(s)",
        "  a.py: direct 0 \u2192 1",
        "-- this code base has no baseline yet: write the first one with `sgconf-ratchet init`",
    ]
    assert len(refusal_message([(f"f{i:02}.py", "direct", 0, 1) for i in range(10)], first=False).splitlines()) == 12


def test_render_counts_sorted_with_reasons() -> None:
    """Paths sorted, kinds in report order, zero kinds left out, a reason under its file."""
    text = render_counts({"b.py": {"write": 1, "direct": 2, "alias": 0}, "a.py": {"alias": 1}}, {"b.py": 'legacy "x"'})
    assert text == (
        f"{COUNTS_MARKER}\n\n"
        '[counts."a.py"]\nalias = 1\n\n'
        '[counts."b.py"]\ndirect = 2\nwrite = 1\nreason = "legacy \\"x\\""\n'
    )


def test_write_counts_keeps_the_head_and_replaces_the_counts(tmp_path: Path) -> None:
    """Everything above the counts stays byte for byte; reasons of dropped files go; the mode is kept."""
    path = tmp_path / "ratchet.toml"
    path.write_text('[config]\ninclude = ["pkg/**"]\n\n[counts."old.py"]\ndirect = 4\n', encoding="utf-8")
    os.chmod(path, 0o640)
    write_counts(path, {"a.py": {"direct": 1}}, {"a.py": "why", "gone.py": "was"})
    assert path.read_text(encoding="utf-8") == (
        f'[config]\ninclude = ["pkg/**"]\n\n{COUNTS_MARKER}\n\n[counts."a.py"]\ndirect = 1\nreason = "why"\n'
    )
    assert oct(path.stat().st_mode & 0o777) == "0o640"
    # a second write finds the marker
    write_counts(path, {}, {})
    assert path.read_text(encoding="utf-8") == f'[config]\ninclude = ["pkg/**"]\n\n{COUNTS_MARKER}\n'
    empty = tmp_path / "empty.toml"
    empty.write_text("", encoding="utf-8")
    write_counts(empty, {"a.py": {"alias": 2}}, {})
    assert empty.read_text(encoding="utf-8") == f'{COUNTS_MARKER}\n\n[counts."a.py"]\nalias = 2\n'


def test_write_counts_refuses_tables_after_the_counts(tmp_path: Path) -> None:
    """Tables after the counts would be lost: refused, the file untouched."""
    path = tmp_path / "ratchet.toml"
    text = '[counts."a.py"]\ndirect = 1\n\n[config]\ninclude = ["x"]\n'
    path.write_text(text, encoding="utf-8")
    with pytest.raises(RatchetConfigError) as info:
        write_counts(path, {}, {})
    assert str(info.value) == (
        "ratchet.toml has other tables after the counts section (config); update would drop them "
        '-- move [config] and [[exempt]] above the first [counts."..."] table'
    )
    assert path.read_text(encoding="utf-8") == text
    path.write_text('[counts."a.py"]\ndirect = = 1\n', encoding="utf-8")
    with pytest.raises(RatchetConfigError, match=r"other tables after the counts section \(\?\)"):
        write_counts(path, {}, {})


def test_write_counts_reports_a_failed_write_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that fails raises with the fix, keeps the old file and removes its temporary file."""
    path = tmp_path / "ratchet.toml"
    path.write_text("[config]\n", encoding="utf-8")

    def refuse(src: str, dst: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(RatchetConfigError) as info:
        write_counts(path, {"a.py": {"direct": 1}}, {})
    assert str(info.value) == f"cannot write {path}: Permission denied -- check its permissions"
    assert path.read_text(encoding="utf-8") == "[config]\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ratchet.toml"]
    with pytest.raises(RatchetConfigError, match="cannot read"):
        write_counts(tmp_path / "missing.toml", {}, {})


def test_a_regression_lists_only_its_own_file_and_kind(tmp_path: Path) -> None:
    """The sites of a regression are those of that file and kind, not the file's other kinds nor other files."""
    mine = site("a.py", "alias")
    scans = [FileScan("a.py", (mine, site("a.py", "direct"))), FileScan("b.py", (site("b.py", "alias"),))]
    cfg = config(tmp_path, {"a.py": {"direct": 1}, "b.py": {"alias": 1}})
    [regression] = compare(cfg, scans, full=False).regressions
    assert regression.sites == (mine,)


def test_an_exemption_used_only_by_writes_or_allowed_reads_is_stale(tmp_path: Path) -> None:
    """Writes are never exempt and allowed reads need no exemption, so neither keeps one alive."""
    entry = Exempt("a.py", "page_size", "old")
    cfg = config(tmp_path, {"a.py": {"write": 1}}, exempt=(entry,))
    only_write = [FileScan("a.py", (site("a.py", "write"),))]
    assert compare(cfg, only_write, full=True).stale_exempts == (entry,)
    allowed = [FileScan("a.py", (site("a.py", allowed="why"),), (AllowComment("a.py", 1, 9, "why", used=True),))]
    assert compare(config(tmp_path, exempt=(entry,)), allowed, full=True).stale_exempts == (entry,)


def test_non_ascii_paths_and_reasons_are_written_as_they_are() -> None:
    """Paths and reasons keep their characters (TOML is UTF-8)."""
    assert render_counts({"caf\u00e9.py": {"direct": 1}}, {"caf\u00e9.py": "d\u00e9j\u00e0"}).splitlines()[2:] == [
        '[counts."caf\u00e9.py"]',
        "direct = 1",
        'reason = "d\u00e9j\u00e0"',
    ]


def test_a_file_that_starts_with_the_marker_is_rewritten_in_place(tmp_path: Path) -> None:
    """Counts written into an empty file, then again, keep one marker and nothing above it."""
    path = tmp_path / "ratchet.toml"
    path.write_text(f'{COUNTS_MARKER}\n\n[counts."a.py"]\nalias = 2\n', encoding="utf-8")
    write_counts(path, {"b.py": {"direct": 1}}, {})
    assert path.read_text(encoding="utf-8") == f'{COUNTS_MARKER}\n\n[counts."b.py"]\ndirect = 1\n'


def test_a_temporary_file_that_cannot_be_made_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """When not even the temporary file can be created the error says so and the file stays."""
    path = tmp_path / "ratchet.toml"
    path.write_text("[config]\n", encoding="utf-8")

    def refuse(**kw: object) -> tuple[int, str]:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(RatchetConfigError) as info:
        write_counts(path, {"a.py": {"direct": 1}}, {})
    assert str(info.value) == f"cannot write {path}: No space left on device -- check its permissions"
    assert path.read_text(encoding="utf-8") == "[config]\n"
