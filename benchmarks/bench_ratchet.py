"""Read-ratchet speed over a large real tree: the installed torch package and the stdlib.

Prints files/s for a plain `ast` checker of the direct and alias forms (written here),
for the lint with a cold cache (prefilter + libcst + process pool) and with a warm
cache, and the two ratios against the `ast` checker, all measured in this one run.
Targets: cold <= 1.5x the ast checker, warm <= 0.2x.

    python benchmarks/bench_ratchet.py [--limit N]
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import sysconfig
import tempfile
import time
from pathlib import Path

from tools.ratchet.cache import ScanCache
from tools.ratchet.config import load_config
from tools.ratchet.runner import ScanStats, SourceFile, scan_files
from tools.ratchet.scanner import scan_text
from tools.ratchet.settings import decode

ROOT = Path(__file__).resolve().parents[1]
GETTERS = {"get_server_args"}


def tree_files(limit: int | None) -> list[SourceFile]:
    """Every .py file of the installed torch package and of the standard library."""
    roots = []
    spec = importlib.util.find_spec("torch")  # located, never imported
    if spec is not None and spec.origin is not None:
        roots.append(Path(spec.origin).parent)
    roots.append(Path(sysconfig.get_paths()["stdlib"]))
    files: list[SourceFile] = []
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in ("site-packages", "__pycache__"))
            for name in sorted(filenames):
                if name.endswith(".py"):
                    path = Path(dirpath) / name
                    files.append(SourceFile(path.as_posix(), path))
    return files[:limit] if limit else files


class _AstChecker(ast.NodeVisitor):
    """The baseline: direct `get_server_args().f` and per-function aliases, with `ast`."""

    def __init__(self, fields: frozenset[str]) -> None:
        self.fields = fields
        self.aliases: list[set[str]] = [set()]
        self.hits = 0

    def _is_getter_call(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in GETTERS

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.aliases.append(set())
        self.generic_visit(node)
        self.aliases.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Assign(self, node: ast.Assign) -> None:
        self.generic_visit(node)
        for target in node.targets:
            if isinstance(target, ast.Name):
                if self._is_getter_call(node.value):
                    self.aliases[-1].add(target.id)
                else:
                    self.aliases[-1].discard(target.id)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in self.fields:
            base = node.value
            if self._is_getter_call(base) or (isinstance(base, ast.Name) and base.id in self.aliases[-1]):
                self.hits += 1
        self.generic_visit(node)


def ast_check(files: list[SourceFile], fields: frozenset[str]) -> tuple[int, int]:
    hits = errors = 0
    for file in files:
        try:
            tree = ast.parse(file.path.read_bytes(), filename=str(file.path))
        except (SyntaxError, ValueError):
            errors += 1
            continue
        checker = _AstChecker(fields)
        checker.visit(tree)
        hits += checker.hits
    return hits, errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="only the first N files")
    parser.add_argument("-j", "--jobs", type=int, default=0)
    parser.add_argument("--sample", type=int, default=60, help="files for the no-prefilter libcst comparison")
    args = parser.parse_args()

    config = load_config(ROOT / "ratchet.toml")
    settings = config.settings()
    files = tree_files(args.limit)
    size_mb = sum(f.path.stat().st_size for f in files) / 1e6
    print(f"tree: {len(files)} files, {size_mb:.1f} MB (torch + stdlib)")

    t0 = time.perf_counter()
    hits, ast_errors = ast_check(files, settings.fields)
    t_ast = time.perf_counter() - t0

    with tempfile.TemporaryDirectory() as tmp:
        cache_dir = Path(tmp) / "cache"
        cold_stats = ScanStats()
        t0 = time.perf_counter()
        cold = scan_files(files, settings, cache=ScanCache(cache_dir, settings), jobs=args.jobs, stats=cold_stats)
        t_cold = time.perf_counter() - t0
        warm_stats = ScanStats()
        t0 = time.perf_counter()
        warm = scan_files(files, settings, cache=ScanCache(cache_dir, settings), jobs=args.jobs, stats=warm_stats)
        t_warm = time.perf_counter() - t0
    assert warm == cold

    sites = sum(len(s.sites) for s in cold)
    lint_errors = sum(1 for s in cold if s.error)
    print(f"ast checker : {len(files) / t_ast:10.0f} files/s  ({t_ast:.2f} s, {hits} reads, {ast_errors} unparsable)")
    print(
        f"lint cold   : {len(files) / t_cold:10.0f} files/s  ({t_cold:.2f} s, {sites} sites, {lint_errors} errors, "
        f"{cold_stats.prefiltered_out} prefiltered out, {cold_stats.parsed} parsed)"
    )
    print(f"lint warm   : {len(files) / t_warm:10.0f} files/s  ({t_warm:.2f} s, {warm_stats.cache_hits} cache hits, {warm_stats.parsed} parsed)")
    print(f"ratio cold/ast = {t_cold / t_ast:.3f}  (target <= 1.5)")
    print(f"ratio warm/ast = {t_warm / t_ast:.3f}  (target <= 0.2)")

    # what the prefilter saves: libcst on every file of a sample, against ast on the same sample
    sample = files[:: max(1, len(files) // args.sample)][: args.sample]
    t0 = time.perf_counter()
    ast_check(sample, settings.fields)
    t_ast_sample = time.perf_counter() - t0
    t0 = time.perf_counter()
    for file in sample:
        try:
            scan_text(file.rel, decode(file.path.read_bytes()), settings)
        except (UnicodeDecodeError, SyntaxError):
            pass
    t_cst_sample = time.perf_counter() - t0
    print(f"no prefilter: libcst scan / ast on {len(sample)} sampled files = {t_cst_sample / t_ast_sample:.1f}x")


if __name__ == "__main__":
    main()
