"""Read-ratchet speed on a generated, serving-shaped corpus where every file reads the record.

The corpus (about 50k lines by default) is many classes and functions that each read 5-30
record fields through parameters, `self.server_args`, chains such as
`self.model_runner.server_args`, aliases and locals, between ordinary code; the text
prefilter skips nothing there. Measured side by side in this one run and printed as
ratios against a plain stdlib-`ast` walk of the same files (read, parse, visit every
node):

- cold `check` (empty cache; process pool, and one process for comparison),
- warm `check` (every file served from the content-hash cache),
- Fixit running an equivalent one-rule lint, when `fixit` is importable by the Python
  given with `--fixit-python` (install it in a throwaway venv, never in this project);
- `sgconf-ratchet fix` through the CLI against `sgconf-ratchet check` through the CLI on
  the same project: a cold fix (empty caches, every file rewritten: the project says
  `one_record_per_process`, so held records are rewritten too; and once in the default
  mode, where those are only listed for review) against a cold check, and a fix with
  nothing left to change against a warm check.

Goals: cold <= 3x the ast walk, warm <= 0.2x, Fixit >= 10x slower than a cold check;
fix cold <= 2x a cold check, a no-op fix <= a warm check.

    python benchmarks/bench_ratchet.py [--lines 50000] [-j 0] [--fixit-python /tmp/fixit-venv/bin/python]
"""

from __future__ import annotations

import argparse
import ast
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from tools.ratchet.cache import ScanCache
from tools.ratchet.config import load_config
from tools.ratchet.runner import ScanStats, SourceFile, scan_files
from tools.ratchet.settings import ScanSettings

ROOT = Path(__file__).resolve().parents[1]


class Corpus:
    """Deterministic serving-shaped modules; `expected` counts the raw reads written."""

    def __init__(self, fields: list[str], seed: int = 7) -> None:
        self.rng = random.Random(seed)
        self.fields = fields
        self.expected = 0

    def _fields(self) -> list[str]:
        return self.rng.sample(self.fields, self.rng.randint(5, 30))

    def _filler(self, indent: str) -> list[str]:
        r = self.rng.randint(0, 5)
        pick = [
            [
                f"{indent}total = sum(len(req) for req in batch)",
                f"{indent}if total > limit:",
                f"{indent}    total = limit",
            ],
            [
                f"{indent}for i, req in enumerate(batch):",
                f"{indent}    if req is None:",
                f"{indent}        continue",
                f"{indent}    seen[i] = req",
            ],
            [f'{indent}log.debug("step", size=len(batch), limit=limit)'],
            [
                f"{indent}try:",
                f"{indent}    out = self.pool.alloc(len(batch))",
                f"{indent}except MemoryError:",
                f"{indent}    out = None",
            ],
            [
                f"{indent}ratio = (limit - len(batch)) / max(limit, 1)",
                f"{indent}tokens = [t for t in range(limit) if t % 2]",
            ],
            [f"{indent}with self.lock:", f"{indent}    self.pending.extend(batch)"],
        ][r]
        return pick

    def _reads(self, base: str, indent: str) -> list[str]:
        lines = []
        for j, field in enumerate(self._fields()):
            self.expected += 1
            lines.append(f"{indent}v{j} = {base}.{field}")
            if self.rng.random() < 0.3:
                lines.extend(self._filler(indent))
        return lines

    def method(self, k: int) -> list[str]:
        style = self.rng.randrange(4)
        lines = [
            f"    def step_{k}(self, batch, limit=16):",
            '        """Run one scheduling step over `batch`."""',
            "        seen = {}",
        ]
        if style == 0:
            lines += self._reads("self.server_args", "        ")
        elif style == 1:
            lines += ["        sa = self.server_args"] + self._reads("sa", "        ")
        elif style == 2:
            lines += self._reads("self.model_runner.server_args", "        ")
        else:
            lines += ["        if batch:"] + self._reads("self.server_args", "            ")
        lines += self._filler("        ") + ["        return seen", ""]
        return lines

    def function(self, k: int) -> list[str]:
        style = self.rng.randrange(4)
        if style == 0:
            lines = [f"def plan_{k}(server_args: ServerArgs, model):"] + self._reads("server_args", "    ")
        elif style == 1:
            lines = [f"def plan_{k}(model):", "    cfg = get_server_args()"] + self._reads("cfg", "    ")
        elif style == 2:
            lines = [f"def plan_{k}(model, **kwargs):", '    args = kwargs["server_args"]'] + self._reads(
                "args", "    "
            )
        else:
            lines = [f"def plan_{k}(server_args, model):"] + self._reads("server_args", "    ")
        lines += ["    batch, limit, seen = [], 16, {}"] + self._filler("    ") + ["    return model", "", ""]
        return lines

    def module(self, i: int, target_lines: int) -> str:
        lines = [
            f'"""Generated serving module {i}."""',
            "",
            "from __future__ import annotations",
            "",
            "import structlog",
            "",
            "from runtime import get_server_args",
            "from sgconf import ServerArgs",
            "",
            "log = structlog.get_logger()",
            "",
            "",
        ]
        k = 0
        while len(lines) < target_lines:
            lines += [f"class Worker{k}:", "    def __init__(self, server_args: ServerArgs, model_runner):"]
            lines += ["        self.server_args = server_args", "        self.model_runner = model_runner", ""]
            for _ in range(self.rng.randint(2, 5)):
                lines += self.method(k)
                k += 1
            lines.append("")
            lines += self.function(k)
            k += 1
        return "\n".join(lines) + "\n"


def write_corpus(folder: Path, fields: list[str], total_lines: int) -> tuple[list[SourceFile], int, int]:
    corpus = Corpus(fields)
    files, lines, i = [], 0, 0
    while lines < total_lines:
        text = corpus.module(i, 500)
        path = folder / f"serving_{i:03d}.py"
        path.write_text(text, encoding="utf-8")
        files.append(SourceFile(path.name, path))
        lines += text.count("\n")
        i += 1
    return files, lines, corpus.expected


def ast_walk(files: list[SourceFile]) -> int:
    """The baseline: read, parse with the C parser and visit every node once."""
    nodes = 0
    for file in files:
        tree = ast.parse(file.path.read_bytes(), filename=file.rel)
        for _ in ast.walk(tree):
            nodes += 1
    return nodes


def best(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


FIXIT_RULE = '''
"""One Fixit rule equivalent to the ratchet on this corpus: raw field reads of the record."""

import libcst as cst
from fixit import LintRule

FIELDS = frozenset({fields!r})


class RawRecordRead(LintRule):
    def __init__(self):
        super().__init__()
        self.names = [set()]

    def visit_FunctionDef(self, node):
        names = set()
        for param in (*node.params.params, *node.params.kwonly_params):
            annotation = param.annotation
            is_record = param.name.value == "server_args"
            if annotation is not None:
                is_record = isinstance(annotation.annotation, cst.Name) and annotation.annotation.value == "ServerArgs"
            if is_record:
                names.add(param.name.value)
        self.names.append(names)

    def leave_FunctionDef(self, original_node):
        self.names.pop()

    def _record(self, expr):
        if isinstance(expr, cst.Name):
            return expr.value in self.names[-1]
        if isinstance(expr, cst.Attribute):
            return expr.attr.value == "server_args"
        if isinstance(expr, cst.Call):
            return isinstance(expr.func, cst.Name) and expr.func.value in ("get_server_args", "ServerArgs")
        if isinstance(expr, cst.Subscript):
            key = expr.slice[0].slice
            return isinstance(key, cst.Index) and isinstance(key.value, cst.SimpleString) and "server_args" in key.value.value
        return False

    def visit_Assign(self, node):
        if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name) and self._record(node.value):
            self.names[-1].add(node.targets[0].target.value)

    def visit_Attribute(self, node):
        if node.attr.value in FIELDS and self._record(node.value):
            self.report(node, "raw read of a record field")
'''


def run_fixit(python: str, folder: Path, fields: list[str]) -> tuple[float, int] | None:
    """Wall time and violations of `fixit lint` with the rule above, or None when Fixit is missing."""
    probe = subprocess.run([python, "-c", "import fixit"], capture_output=True)
    if probe.returncode != 0:
        return None
    rules = folder.parent / "fixit_rules"
    rules.mkdir(exist_ok=True)
    (rules / "bench_rule.py").write_text(textwrap.dedent(FIXIT_RULE).format(fields=sorted(fields)), encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(rules))
    cmd = [python, "-m", "fixit", "--rules", "bench_rule", "lint", str(folder)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=folder.parent)
    elapsed = time.perf_counter() - t0
    hits = len(re.findall(r"RawRecordRead", proc.stdout))
    if hits == 0:
        print(f"fixit produced no violations (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
    return elapsed, hits


LAST_NOTE: list[str] = [""]


def _cli(project: Path, *args: str) -> int:
    """Run `sgconf-ratchet` in `project`; its last line on stderr is kept in LAST_NOTE."""
    import contextlib
    import io

    from tools.ratchet.cli import main as ratchet

    here = Path.cwd()
    os.chdir(project)
    try:
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = ratchet(list(args))
        LAST_NOTE[0] = (err.getvalue().splitlines() or [""])[-1]
        return code
    finally:
        os.chdir(here)


def fix_timings(corpus: Path, root: Path, repeat: int, jobs: int) -> dict[str, float]:
    """Cold and warm check, cold fix (both modes) and a no-op fix, all through the CLI."""
    project = root / "project"

    def fresh(per_process: bool) -> None:
        shutil.rmtree(project, ignore_errors=True)
        shutil.copytree(corpus, project / "pkg")
        extra = "one_record_per_process = true\n" if per_process else ""
        (project / "ratchet.toml").write_text(
            f'[config]\nfield_source = "sgconf:SERVING"\nderived = ["attn_tp_size", "attn_dp_size"]\ninclude = ["pkg/**"]\n{extra}',
            encoding="utf-8",
        )

    def timed(prepare, *args: str) -> float:  # type: ignore[no-untyped-def]
        times = []
        for _ in range(repeat):
            prepare()
            t0 = time.perf_counter()
            _cli(project, *args, "-j", str(jobs))
            times.append(time.perf_counter() - t0)
        return min(times)

    def no_cache() -> None:
        shutil.rmtree(project / ".sgconf-ratchet-cache", ignore_errors=True)

    out: dict[str, float] = {}
    fresh(True)
    out["check cold"] = timed(no_cache, "check")
    out["check warm"] = timed(lambda: None, "check")
    out["fix cold"] = timed(lambda: fresh(True), "fix")
    print(f"fix cold, one record per process: {LAST_NOTE[0]}")
    out["fix cold (review mode)"] = timed(lambda: fresh(False), "fix")
    print(f"fix cold, default (held and passed records listed for review): {LAST_NOTE[0]}")
    fresh(True)
    _cli(project, "fix")
    _cli(project, "fix")  # the files the first run rewrote are scanned once more
    out["fix no-op"] = timed(lambda: None, "fix")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--lines", type=int, default=50_000, help="corpus size in lines")
    parser.add_argument("-j", "--jobs", type=int, default=0, help="pool size for the cold run (0: auto)")
    parser.add_argument("--repeat", type=int, default=3, help="take the best of this many runs")
    parser.add_argument(
        "--fixit-python", default=shutil.which("python3") or sys.executable, help="a Python with fixit installed"
    )
    args = parser.parse_args()

    config = load_config(ROOT / "ratchet.toml")
    settings: ScanSettings = config.settings()
    fields = sorted(settings.fields)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "corpus"
        folder.mkdir()
        files, lines, expected = write_corpus(folder, fields, args.lines)
        print(f"corpus: {len(files)} files, {lines} lines, {expected} raw reads written; {os.cpu_count()} CPUs")

        t_ast = best(lambda: ast_walk(files), args.repeat)

        def cold(jobs: int) -> list:  # type: ignore[type-arg]
            cache_dir = Path(tmp) / f"cache-{time.perf_counter_ns()}"
            return scan_files(files, settings, cache=ScanCache(cache_dir, settings), jobs=jobs, stats=ScanStats())

        t_cold = best(lambda: cold(args.jobs), args.repeat)
        t_cold_one = best(lambda: cold(1), args.repeat)
        warm_dir = Path(tmp) / "cache-warm"
        first = scan_files(files, settings, cache=ScanCache(warm_dir, settings), jobs=args.jobs)
        found = sum(len(s.sites) for s in first)
        stats = ScanStats()
        t_warm = best(
            lambda: scan_files(files, settings, cache=ScanCache(warm_dir, settings), stats=stats), args.repeat
        )
        fixit = run_fixit(args.fixit_python, folder, fields)
        fix = fix_timings(folder, Path(tmp), max(1, args.repeat - 1), args.jobs)

    print(f"sites found: {found} of {expected} written")
    print(f"ast walk           : {t_ast:7.3f} s")
    print(f"check cold (pool)  : {t_cold:7.3f} s   ratio to ast walk {t_cold / t_ast:6.2f}  (goal <= 3)")
    print(f"check cold (1 proc): {t_cold_one:7.3f} s   ratio to ast walk {t_cold_one / t_ast:6.2f}")
    print(f"check warm         : {t_warm:7.3f} s   ratio to ast walk {t_warm / t_ast:6.2f}  (goal <= 0.2)")
    if fixit is None:
        print("fixit: not installed for --fixit-python; skipped (pip install fixit in a throwaway venv)")
    else:
        t_fixit, hits = fixit
        print(
            f"fixit (one rule)   : {t_fixit:7.3f} s   {hits} violations; fixit / check cold = {t_fixit / t_cold:6.1f}x  (goal >= 10)"
        )
    print("through the CLI:")
    for name, seconds in fix.items():
        print(f"  {name:<24}: {seconds:7.3f} s")
    print(f"  fix cold / check cold          : {fix['fix cold'] / fix['check cold']:6.2f}  (goal <= 2)")
    print(f"  fix cold (review) / check cold : {fix['fix cold (review mode)'] / fix['check cold']:6.2f}")
    print(f"  fix no-op / check warm         : {fix['fix no-op'] / fix['check warm']:6.2f}  (goal <= 1)")


if __name__ == "__main__":
    main()
