"""`python -m tools.mutation` (`make mutate`): mutate the configured modules and report what the tests miss.

Exit status: 0 when every module reaches the threshold, 1 when one does not, 2 for a
usage or configuration error or tests that fail without any mutation.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from tools.mutation.config import (
    CONFIG_NAME,
    MutationConfig,
    Target,
    load_config,
    load_equivalents,
    match_equivalents,
)
from tools.mutation.errors import BaselineFailed, MutationError
from tools.mutation.execute import Executor, Job, Outcome, Result, preload
from tools.mutation.mutants import Mutant, module_name, mutant_code, mutants_of
from tools.mutation.report import ModuleSummary, render
from tools.usage import UsageParser

# an unmutated run may take this long before its tests count as hung
BASELINE_TIMEOUT_S = 900.0


class _Parser(UsageParser):
    tool = "mutate"
    help_command = "python -m tools.mutation"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m tools.mutation", description="Mutation testing of the modules listed in mutation.toml."
    )
    parser.add_argument("paths", nargs="*", help="modules to mutate (default: every module of the config)")
    parser.add_argument(
        "--config", type=Path, default=Path(CONFIG_NAME), help=f"config file (default: ./{CONFIG_NAME})"
    )
    parser.add_argument("-j", "--workers", type=int, help="test runs at once (default: the config's workers)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit without running tests")
    parser.add_argument("--spawn", action="store_true", help="start a fresh interpreter per run instead of forking")
    parser.add_argument("--recheck-equivalents", action="store_true", help="also run the mutants listed as equivalent")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return _run(args)
    except MutationError as exc:
        print(f"mutate: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # the running children were killed on the way out
        print("mutate: interrupted -- nothing is reported for a partial run", file=sys.stderr)
        return 130


def _compiled(config: MutationConfig, mutants: Sequence[Mutant]) -> tuple[list[Job], int]:
    jobs, failed = [], 0
    for mutant in mutants:
        try:
            code = mutant_code(config.root, mutant.path, mutant.index)
        except SyntaxError:
            failed += 1
            continue
        jobs.append(Job(mutant.path, mutant.module, (), 0.0, mutant, code))
    return jobs, failed


def _run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    targets = [config.target(p) for p in args.paths] if args.paths else list(config.targets)
    equivalents_path = config.root / config.equivalents if config.equivalents else None
    entries = load_equivalents(equivalents_path) if equivalents_path else ()
    mutants = {t.path: mutants_of(config.root, t.path) for t in targets}
    every = [m for ms in mutants.values() for m in ms]
    equivalent, stale = match_equivalents(entries, every)

    if args.list:
        for mutant in every:
            mark = "  [equivalent]" if mutant.key in equivalent else ""
            print(f"{mutant.location()}{mark}")
        return 0

    workers = args.workers or config.workers
    executor = Executor(config.root, config.pytest_args, workers=workers, spawn=args.spawn)
    if not executor.spawn:
        preload(config.preload)
    try:
        baselines = _baselines(executor, targets)
        jobs: list[Job] = []
        not_compiled: dict[str, int] = {}
        for target in targets:
            timeout = max(config.timeout_min_s, config.timeout_factor * baselines[target.path])
            compiled, failed = _compiled(
                config, [m for m in mutants[target.path] if args.recheck_equivalents or m.key not in equivalent]
            )
            not_compiled[target.path] = failed
            jobs += [Job(j.path, j.module, target.tests, timeout, j.mutant, j.code) for j in compiled]
        print(f"mutate: {len(jobs)} mutants of {len(targets)} modules, {workers} at a time", flush=True)
        summaries, killed_equivalents = _mutate(executor, targets, mutants, jobs, equivalent, not_compiled)
    finally:
        executor.close()
    print()
    print(
        render(
            summaries,
            threshold=config.threshold,
            stale=stale,
            not_equivalent=killed_equivalents,
            equivalents_name=config.equivalents or "the equivalents file",
        )
    )
    return 0 if all(s.score >= config.threshold for s in summaries) else 1


def _baselines(executor: Executor, targets: Sequence[Target]) -> dict[str, float]:
    """Seconds each module's tests take unmutated; raises BaselineFailed when they fail or hang."""
    jobs = [Job(t.path, module_name(t.path), t.tests, BASELINE_TIMEOUT_S) for t in targets]
    times: dict[str, float] = {}
    for result in executor.run(jobs):
        if result.outcome is Outcome.NOT_LOADED:
            raise MutationError(
                f"the tests of {result.job.path} never import {result.job.module} -- list the tests that cover it in mutation.toml"
            )
        if result.outcome is not Outcome.SURVIVED:
            how = "hang" if result.outcome is Outcome.TIMEOUT else f"fail (exit status {result.exit_code})"
            raise BaselineFailed(
                f"the tests of {result.job.path} {how} without any mutation -- fix them first:\n{result.log_tail.rstrip()}"
            )
        times[result.job.path] = result.seconds
        print(
            f"mutate: baseline {result.job.path}: {', '.join(result.job.tests)} pass in {result.seconds:.1f} s",
            flush=True,
        )
    return times


def _mutate(
    executor: Executor,
    targets: Sequence[Target],
    mutants: dict[str, list[Mutant]],
    jobs: Sequence[Job],
    equivalent: set[str],
    not_compiled: dict[str, int],
) -> tuple[list[ModuleSummary], list[Mutant]]:
    """Run every job; a module's summary is printed as soon as its last mutant is judged.

    Returns the summaries and the mutants listed as equivalent that a test killed.
    """
    left: dict[str, int] = defaultdict(int)
    for job in jobs:
        left[job.path] += 1
    results: dict[str, list[Result]] = defaultdict(list)
    started = time.monotonic()
    summaries: dict[str, ModuleSummary] = {}

    def summarise(path: str) -> ModuleSummary:
        judged = [r for r in results[path] if r.job.mutant is not None and r.job.mutant.key not in equivalent]
        return ModuleSummary(
            path=path,
            killed=sum(r.outcome is Outcome.KILLED for r in judged),
            timed_out=sum(r.outcome is Outcome.TIMEOUT for r in judged),
            survivors=tuple(
                sorted(
                    (r.job.mutant for r in judged if r.outcome is Outcome.SURVIVED and r.job.mutant),
                    key=lambda m: m.index,
                )
            ),
            equivalent=sum(1 for m in mutants[path] if m.key in equivalent),
            not_compiled=not_compiled.get(path, 0),
            seconds=time.monotonic() - started,
        )

    def on_result(result: Result) -> None:
        path = result.job.path
        if result.outcome is Outcome.NOT_LOADED:
            raise MutationError(
                f"a mutant of {path} passed its tests without being imported by them -- {result.log_tail[-500:]}"
            )
        results[path].append(result)
        left[path] -= 1
        if left[path] == 0:
            summaries[path] = summarise(path)
            print(f"mutate: {summaries[path].line()}", flush=True)

    executor.run(jobs, on_result)
    for target in targets:
        if target.path not in summaries:  # a module whose every mutant is a known equivalent
            summaries[target.path] = summarise(target.path)
    killed_equivalents = sorted(
        (
            r.job.mutant
            for rs in results.values()
            for r in rs
            if r.job.mutant and r.job.mutant.key in equivalent and r.outcome is not Outcome.SURVIVED
        ),
        key=lambda m: (m.path, m.index),
    )
    return [summaries[t.path] for t in targets], killed_equivalents
