"""`sgconf-ratchet`: init, check, update, explain and fix raw record reads against `ratchet.toml`,
and `unread` for declared fields nothing reads.

Exit status: 0 clean, 1 violations (or sites `fix` had to leave), 2 usage, config,
read or parse errors. No traceback reaches the user for bad input.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from tools.ratchet.baseline import (
    compare,
    counted_sites,
    exempt_for,
    observed_counts,
    updated_counts,
    write_counts,
)
from tools.ratchet.cache import FixCache, ScanCache, tool_version
from tools.ratchet.config import CONFIG_NAME, RatchetConfig, find_config, load_config
from tools.ratchet.errors import BaselineRefused, RatchetConfigError, RatchetError
from tools.ratchet.report import FORMATS, render, site_line
from tools.ratchet.runner import ScanStats, collect_files, project_settings, scan_files
from tools.ratchet.settings import ScanSettings
from tools.ratchet.sites import FileScan
from tools.usage import UsageParser


class _Parser(UsageParser):
    tool = "sgconf-ratchet"
    help_command = "sgconf-ratchet"


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--config", type=Path, help="ratchet.toml to use (default: nearest in . or a parent)")
    common.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
    common.add_argument("-j", "--jobs", type=int, default=0, help="worker processes for cold runs (0: auto, 1: none)")
    common.add_argument("--no-cache", action="store_true", help="neither read nor write the scan cache")

    parser = _Parser(
        prog="sgconf-ratchet", description="The read ratchet: raw ServerArgs field reads may only go down."
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    check = sub.add_parser("check", parents=[common], help="fail when a per-file count rises or falls without update")
    check.add_argument("paths", nargs="*", help="files or folders (default: the configured include globs)")
    update = sub.add_parser("update", parents=[common], help="lower the baseline to the observed counts")
    update.add_argument("paths", nargs="*")
    update.add_argument("--allow-increase", action="store_true", help="let counts rise (needs --reason)")
    update.add_argument("--reason", help="why the counts rise; written into ratchet.toml")
    init = sub.add_parser(
        "init", parents=[common], help="write the first baseline of a code base (creates ratchet.toml if needed)"
    )
    init.add_argument("--field-source", help="your schema as package.module:SCHEMA (written into a new ratchet.toml)")
    init.set_defaults(paths=[])
    explain = sub.add_parser("explain", parents=[common], help="list every site in a file")
    explain.add_argument("file")
    fix = sub.add_parser("fix", parents=[common], help="rewrite raw reads into accessor reads")
    fix.add_argument("paths", nargs="*")
    fix.add_argument("--diff", action="store_true", help="print a unified diff instead of writing files")
    unread = sub.add_parser("unread", parents=[common], help="list declared fields no code reads; fail on hot ones")
    unread.set_defaults(paths=[])
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point; returns the exit status."""
    try:
        return _main(argv)
    except BrokenPipeError:
        # the reader went away (`... | head`): stop quietly, and keep the interpreter's own
        # flush at exit from raising again on the closed pipe
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):  # stdout is not a real file (captured); nothing to flush there
            pass
        return 1


def _main(argv: Sequence[str] | None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # usage errors exit 2, --help exits 0
        return exc.code if isinstance(exc.code, int) else 2
    try:
        status = _dispatch(args)
    except BaselineRefused as exc:
        print(f"sgconf-ratchet: {exc}", file=sys.stderr)
        status = 1
    except RatchetError as exc:
        print(f"sgconf-ratchet: {exc}", file=sys.stderr)
        status = 2
    sys.stdout.flush()
    return status


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "init":
        return _init(args)
    config = load_config(args.config) if args.config else load_config(find_config(Path.cwd()))
    if args.command == "unread":
        return _unread(config, args)
    settings = project_settings(config)
    if args.command == "fix":
        return _fix(config, settings, args)
    if args.command == "explain":
        return _explain(config, settings, args)
    scans = _scan(config, settings, args, args.paths)
    if args.command == "update":
        return _update(config, scans, args)
    return _check(config, scans, args)


def _scan(
    config: RatchetConfig, settings: ScanSettings, args: argparse.Namespace, paths: Sequence[str]
) -> list[FileScan]:
    files = collect_files(config, paths)
    cache = None if args.no_cache else ScanCache(config.root / config.cache_dir, settings, prune=not paths)
    return scan_files(files, settings, cache=cache, jobs=args.jobs, stats=ScanStats())


def _accessors(config: RatchetConfig, scans: Sequence[FileScan]) -> dict[str, str | None]:
    return config.accessors(sorted({s.field for scan in scans for s in scan.sites}))


def _check(config: RatchetConfig, scans: list[FileScan], args: argparse.Namespace) -> int:
    outcome = compare(config, scans, full=not args.paths)
    text = render(
        outcome,
        args.format,
        _accessors(config, scans),
        version=tool_version(),
        config_name=config.file.name,
        record_type=config.record_name,
    )
    if text:
        print(text)
    return outcome.exit_code


def _scan_errors(scans: Sequence[FileScan]) -> list[str]:
    """One `path: error` line per file that could not be read or parsed."""
    return [f"{s.path}: {s.error}" for s in scans if s.error is not None]


def _refused_for_errors(errors: Sequence[str], what: str) -> bool:
    """Print the files' errors and `what` was not done because of them; True when there were any.

    A command that writes or decides from a partial scan would be wrong about the files it
    could not read, so it stops (exit 2) and says so.
    """
    for line in errors:
        print(line, file=sys.stderr)
    if errors:
        print(f"sgconf-ratchet: {what} -- fix the files above first", file=sys.stderr)
    return bool(errors)


def _update(config: RatchetConfig, scans: list[FileScan], args: argparse.Namespace) -> int:
    if _refused_for_errors(_scan_errors(scans), "baseline not updated"):
        return 2
    if args.allow_increase and not (args.reason and args.reason.strip()):
        print("sgconf-ratchet: --allow-increase needs --reason '<why the count rises>'", file=sys.stderr)
        return 2
    counts, increases = updated_counts(config, scans, full=not args.paths, allow_increase=args.allow_increase)
    reasons = dict(config.reasons)
    for path, _, _, _ in increases:
        reasons[path] = args.reason.strip()
    if counts == config.counts and reasons == config.reasons:
        print("sgconf-ratchet: baseline already up to date")
        return 0
    write_counts(config.file, counts, reasons)
    for path, kind, old, new in increases:
        print(f"{path}: {kind} raised from {old} to {new} ({args.reason.strip()})")
    before = sum(sum(k.values()) for k in config.counts.values())
    after = sum(sum(k.values()) for k in counts.values())
    print(f"sgconf-ratchet: baseline updated, {before} -> {after} counted site(s)")
    return 0


def _explain(config: RatchetConfig, settings: ScanSettings, args: argparse.Namespace) -> int:
    path = Path(args.file)
    if not path.is_file():
        print(f"sgconf-ratchet: no such file: '{args.file}' -- pass a Python file", file=sys.stderr)
        return 2
    (scan,) = _scan(config, settings, args, [args.file])
    if scan.error is not None:
        print(f"{scan.path}: {scan.error}", file=sys.stderr)
        return 2
    accessors = _accessors(config, [scan])
    lines = []
    counted: dict[str, int] = {}
    for site in scan.sites:
        exempt = exempt_for(config, site)
        line = site_line(site, accessors)
        if site.allowed is not None:
            line += f"  (allowed: {site.allowed})"
        elif exempt is not None:
            line += f"  (exempt: {exempt.reason})"
        else:
            counted[site.kind] = counted.get(site.kind, 0) + 1
        lines.append(line)
    base = config.counts.get(scan.path, {})
    kinds = sorted(set(counted) | set(base))
    summary = ", ".join(f"{k} {counted.get(k, 0)}/{base.get(k, 0)}" for k in kinds) or "no counted sites"
    lines.append(f"{scan.path}: counted/baseline: {summary}")
    print("\n".join(lines))
    return 0


def _fix(config: RatchetConfig, settings: ScanSettings, args: argparse.Namespace) -> int:
    """Rewrite (or, with --diff, show) every fixable site; the diff alone goes to stdout.

    Files the scan cache knows are judged from their cached sites, files the fix cache
    saw left unchanged are answered from there, and the rest are scanned and rewritten
    in one pass on a process pool (`tools.ratchet.fixrun`).
    """
    from tools.ratchet.fixrun import fix_files

    module = config.module_for_accessors()
    if module is None:
        msg = "fix needs the module the accessors are imported from"
        raise RatchetConfigError(msg + " -- set accessor_module in [config], or point field_source at your schema")
    files = [(f.rel, f.path) for f in collect_files(config, args.paths)]
    accessors = config.accessors(sorted(settings.fields))
    scan_cache = fix_cache = None
    if not args.no_cache:
        scan_cache = ScanCache(config.root / config.cache_dir, settings)
        fix_cache = FixCache(config.root / config.cache_dir, settings, accessors, module, config)
    status = 0
    fixed_total = changed_files = 0
    outcomes = fix_files(
        files,
        settings,
        accessors,
        module_name=module,
        exempts=config.exempt,
        per_process=config.one_record_per_process,
        scan_cache=scan_cache,
        fix_cache=fix_cache,
        jobs=args.jobs,
    )
    where = dict(files)
    for result, encoding in outcomes:
        if result.error is not None:
            _note(f"{result.path}: {result.error}")
            status = 2
            continue
        for site, reason in result.skipped:
            _note(f"{site.path}:{site.line}:{site.col}: field '{site.field}' not fixed: {reason}")
            status = max(status, 1)
        for site, reason in result.review:
            _note(f"{site.path}:{site.line}:{site.col}: field '{site.field}' review: {reason}")
            status = max(status, 1)
        if not result.changed:
            continue
        if args.diff:
            sys.stdout.write(_diff(result.path, result.old, result.new))
        elif not _write(where[result.path], result.path, result.new, encoding):
            status = 2
            continue
        fixed_total += len(result.fixed)
        changed_files += 1
    for cache in (scan_cache, fix_cache):
        if cache is not None:
            cache.save()
    verb = "would fix" if args.diff else "fixed"
    _note(f"sgconf-ratchet: {verb} {fixed_total} site(s) in {changed_files} file(s)")
    return status


def _note(text: str) -> None:
    """Progress and findings of `fix` go to stderr, so stdout carries nothing but the diff."""
    print(text, file=sys.stderr)


def _diff(rel: str, old: str, new: str) -> str:
    """A unified diff with `a/` and `b/` headers relative to the project root, as git writes them."""
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{rel}", f"b/{rel}")
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def _write(path: Path, rel: str, text: str, encoding: str) -> bool:
    try:
        path.write_bytes(text.encode(encoding))
    except (OSError, UnicodeEncodeError) as exc:
        _note(f"{rel}: cannot write: {exc}")
        return False
    return True


INIT_TEMPLATE = """\
# The read ratchet (`sgconf-ratchet check`): raw reads of the record's fields per file may
# only go down. Business code reads config through the accessors instead.
# field_source names your schema (`package.module:SCHEMA`): the fields, hot fields,
# accessors and record class come from it. The README lists every key.

[config]
{field_source}include = ["**/*.py"]
# tests read the raw record on purpose
exclude = ["tests/**", "**/tests/**", "**/test_*.py"]
"""


def _init(args: argparse.Namespace) -> int:
    """Write the first baseline: the observed counts, written once; later changes go through update."""
    if args.config is not None:
        path = args.config
    else:
        try:
            path = find_config(Path.cwd())
        except RatchetError:
            path = Path.cwd() / CONFIG_NAME
    created = not path.exists()
    if created:
        if not args.field_source:
            msg = f"init needs your schema to write {CONFIG_NAME}, or the ratchet would not know your record's fields"
            raise RatchetConfigError(msg + " -- pass --field-source your_package.config:SCHEMA")
        line = f'field_source = "{args.field_source}"\n'
        try:
            path.write_text(INIT_TEMPLATE.format(field_source=line), encoding="utf-8")
        except OSError as exc:
            raise RatchetConfigError(f"cannot write {path}: {exc.strerror or exc} -- check its permissions") from None
    config = load_config(path)
    if config.counts:
        total = sum(sum(kinds.values()) for kinds in config.counts.values())
        msg = f"{config.file.name} already holds a baseline ({total} counted site(s))"
        raise RatchetConfigError(msg + " -- tighten it with `sgconf-ratchet update`; init only writes the first one")
    scans = _scan(config, config.settings(), args, [])
    if _refused_for_errors(_scan_errors(scans), "no baseline written"):
        return 2
    counts = observed_counts(counted_sites(config, scans))
    write_counts(config.file, counts, {})
    total = sum(sum(kinds.values()) for kinds in counts.values())
    made = f"created {config.file.name} and wrote" if created else "wrote"
    print(
        f"sgconf-ratchet: {made} the first baseline: {total} counted site(s) in {len(counts)} of "
        f"{len(scans)} file(s); from now on counts may only go down (`sgconf-ratchet update` tightens)"
    )
    return 0


def _unread(config: RatchetConfig, args: argparse.Namespace) -> int:
    """Exit 1 when a hot field has no reader; unread non-hot fields are warnings."""
    from tools.ratchet.unread import build_report, find_readers, read_path, render_json, render_text

    if args.format not in ("text", "json"):
        raise RatchetConfigError(f"unread prints text or json (got --format {args.format}) -- use --format json")

    declared = config.field_names()
    hot = config.hot_field_names() & set(declared)
    accessors = config.accessors(declared)
    paths = {f: p for f in declared if (p := read_path(f, accessors.get(f))) is not None}
    sources, errors = _parse_all(config)
    if _refused_for_errors(errors, "unread not decided"):
        return 2
    readers = find_readers(sources, paths)
    reasons = {a.field: a.reason for a in config.unread_allow}
    report = build_report(declared, hot, readers, reasons)
    render = render_json if args.format == "json" else render_text
    print(render(report, accessors=accessors, config_name=config.file.name))
    return report.exit_code


def _parse_all(config: RatchetConfig) -> tuple[list[tuple[str, ast.Module]], list[str]]:
    from tools.ratchet.settings import decode
    from tools.ratchet.syntax import parse_any

    sources: list[tuple[str, ast.Module]] = []
    errors: list[str] = []
    for file in collect_files(config):
        try:
            text = decode(file.path.read_bytes())
            sources.append((file.rel, parse_any(file.rel, text, config.target_version)[0]))
        except OSError as exc:
            errors.append(f"{file.rel}: cannot read: {exc.strerror or exc}")
        except (UnicodeDecodeError, LookupError) as exc:
            errors.append(f"{file.rel}: cannot decode: {exc}")
        except (SyntaxError, ValueError, RecursionError) as exc:
            errors.append(f"{file.rel}: cannot parse: {' '.join(str(exc).split())}")
    return sources, errors


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
