"""`sgconf-ratchet`: check, update, explain and fix raw record reads against `ratchet.toml`.

Exit status: 0 clean, 1 violations (or sites `fix` had to leave), 2 usage, config,
read or parse errors. No traceback reaches the user for bad input.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Sequence
from pathlib import Path

from tools.ratchet.baseline import compare, exempt_for, updated_counts, write_counts
from tools.ratchet.cache import ScanCache, tool_version
from tools.ratchet.config import RatchetConfig, find_config, load_config
from tools.ratchet.errors import BaselineRefused, RatchetError
from tools.ratchet.report import FORMATS, render, site_line
from tools.ratchet.runner import ScanStats, collect_files, scan_files
from tools.ratchet.settings import ScanSettings
from tools.ratchet.sites import FileScan


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"sgconf-ratchet: error: {message} -- see sgconf-ratchet --help", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--config", type=Path, help="ratchet.toml to use (default: nearest in . or a parent)")
    common.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
    common.add_argument("-j", "--jobs", type=int, default=0, help="worker processes for cold runs (0: auto, 1: none)")
    common.add_argument("--no-cache", action="store_true", help="neither read nor write the scan cache")

    parser = _Parser(prog="sgconf-ratchet", description="The read ratchet: raw ServerArgs field reads may only go down.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    check = sub.add_parser("check", parents=[common], help="fail when a per-file count rises or falls without update")
    check.add_argument("paths", nargs="*", help="files or folders (default: the configured include globs)")
    update = sub.add_parser("update", parents=[common], help="lower the baseline to the observed counts")
    update.add_argument("paths", nargs="*")
    update.add_argument("--allow-increase", action="store_true", help="let counts rise (needs --reason)")
    update.add_argument("--reason", help="why the counts rise; written into ratchet.toml")
    explain = sub.add_parser("explain", parents=[common], help="list every site in a file")
    explain.add_argument("file")
    fix = sub.add_parser("fix", parents=[common], help="rewrite raw reads into accessor reads")
    fix.add_argument("paths", nargs="*")
    fix.add_argument("--diff", action="store_true", help="print a unified diff instead of writing files")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point; returns the exit status."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # usage errors exit 2, --help exits 0
        return exc.code if isinstance(exc.code, int) else 2
    try:
        config = load_config(args.config) if args.config else load_config(find_config(Path.cwd()))
        settings = config.settings()
        if args.command == "fix":
            return _fix(config, settings, args)
        if args.command == "explain":
            return _explain(config, settings, args)
        scans = _scan(config, settings, args, args.paths)
        if args.command == "update":
            return _update(config, scans, args)
        return _check(config, scans, args)
    except BaselineRefused as exc:
        print(f"sgconf-ratchet: {exc}", file=sys.stderr)
        return 1
    except RatchetError as exc:
        print(f"sgconf-ratchet: {exc}", file=sys.stderr)
        return 2


def _scan(config: RatchetConfig, settings: ScanSettings, args: argparse.Namespace, paths: Sequence[str]) -> list[FileScan]:
    files = collect_files(config, paths)
    cache = None if args.no_cache else ScanCache(config.root / config.cache_dir, settings, prune=not paths)
    return scan_files(files, settings, cache=cache, jobs=args.jobs, stats=ScanStats())


def _accessors(config: RatchetConfig, scans: Sequence[FileScan]) -> dict[str, str | None]:
    return config.accessors(sorted({s.field for scan in scans for s in scan.sites}))


def _check(config: RatchetConfig, scans: list[FileScan], args: argparse.Namespace) -> int:
    outcome = compare(config, scans, full=not args.paths)
    text = render(outcome, args.format, _accessors(config, scans), version=tool_version(), config_name=config.file.name)
    if text:
        print(text)
    return outcome.exit_code


def _update(config: RatchetConfig, scans: list[FileScan], args: argparse.Namespace) -> int:
    errors = [s for s in scans if s.error is not None]
    if errors:
        for scan in errors:
            print(f"{scan.path}: {scan.error}", file=sys.stderr)
        print("sgconf-ratchet: baseline not updated -- fix the files above first", file=sys.stderr)
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
    from tools.ratchet.codemod import fix_text
    from tools.ratchet.settings import decode_with_encoding, may_contain_read

    files = collect_files(config, args.paths)
    accessors = config.accessors(sorted(settings.fields))
    status = 0
    fixed_total = changed_files = 0
    for file in files:
        try:
            text, encoding = decode_with_encoding(file.path.read_bytes())
        except (OSError, UnicodeDecodeError, SyntaxError, LookupError) as exc:
            print(f"{file.rel}: cannot read: {exc}", file=sys.stderr)
            status = 2
            continue
        if not may_contain_read(text, settings.tokens):
            continue
        result = fix_text(
            file.rel,
            text,
            settings,
            accessors,
            module_name=config.accessor_module,
            exempt=lambda site: exempt_for(config, site) is not None,
        )
        if result.error is not None:
            print(f"{file.rel}: {result.error}", file=sys.stderr)
            status = 2
            continue
        for site, reason in result.skipped:
            print(f"{site.path}:{site.line}:{site.col}  {site.kind}  {site.field}  not fixed: {reason}")
            status = max(status, 1)
        if not result.changed:
            continue
        if args.diff:
            diff = difflib.unified_diff(
                result.old.splitlines(keepends=True),
                result.new.splitlines(keepends=True),
                fromfile=f"a/{file.rel}",
                tofile=f"b/{file.rel}",
            )
            sys.stdout.write("".join(diff))
        else:
            try:
                file.path.write_bytes(result.new.encode(encoding))
            except (OSError, UnicodeEncodeError) as exc:
                print(f"{file.rel}: cannot write: {exc}", file=sys.stderr)
                status = 2
                continue
        fixed_total += len(result.fixed)
        changed_files += 1
    verb = "would fix" if args.diff else "fixed"
    print(f"sgconf-ratchet: {verb} {fixed_total} site(s) in {changed_files} file(s)")
    return status


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
