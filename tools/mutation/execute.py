"""Running a module's tests against its mutants, a few at a time, each with a deadline.

Each run is a child process in a session of its own, so a hung mutant (an infinite
loop) and anything its tests started are killed together when the deadline passes; a
run that hits it counts as killed by timeout.

By default the children are forked from this process after it has imported the heavy
third-party libraries (`preload`: torch alone takes seconds to import), and each child
installs its mutant with an import hook before pytest imports anything of the project.
`spawn=True` starts a fresh interpreter per run instead: slower, for platforms without
`fork` or to rule the fork out when a result looks odd.
"""

from __future__ import annotations

import contextlib
import enum
import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import CodeType

import attrs

from tools.mutation import hook
from tools.mutation.mutants import Mutant, mutant_code

_POLL_S = 0.02
_CHILD_CRASH = 70  # the child could not even start pytest
NOT_LOADED = 71  # the tests passed, but never ran the code under test
# pytest's assertion rewriting imports every module of a plugin's distribution (ours
# included) from its source file, ahead of any other import hook: it is turned off
_FORCED_ARGS = ("--assert=plain",)


class Outcome(enum.Enum):
    KILLED = "killed"
    SURVIVED = "survived"
    TIMEOUT = "timeout"
    NOT_LOADED = "not loaded"  # a runner or config fault, never a verdict on the tests


@attrs.frozen(slots=True)
class Job:
    """One test run: the tests of `path`, against mutant `mutant` (None: the unmutated module)."""

    path: str
    module: str
    tests: tuple[str, ...]
    timeout_s: float
    mutant: Mutant | None = None
    code: CodeType | None = attrs.field(default=None, eq=False, repr=False)


@attrs.frozen(slots=True)
class Result:
    job: Job
    outcome: Outcome
    exit_code: int | None
    seconds: float
    log_tail: str = ""


def preload(modules: Iterable[str]) -> list[str]:
    """Import the given third-party modules into this process (children inherit them); returns those imported."""
    done = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        done.append(name)
    return done


def _calm_hypothesis() -> None:
    # the same examples in every run, and no shared example database between runs,
    # so whether a mutant is killed does not depend on the runs before it
    try:
        from hypothesis import settings
    except ImportError:
        return
    settings.register_profile("mutation", derandomize=True, database=None, deadline=None)
    settings.load_profile("mutation")


def run_tests(
    root: Path, path: str, module: str, tests: Sequence[str], pytest_args: Sequence[str], code: CodeType | None
) -> int:
    """In a child: install the mutant (if any) and run pytest over `tests`; returns pytest's exit status.

    Returns NOT_LOADED instead of a pass when the tests never imported the module, or
    imported it without the mutant: a pass would then say nothing about the tests.
    """
    os.chdir(root)
    sys.path.insert(0, str(root))
    if code is not None:
        hook.install(module, root / path, code)
    _calm_hypothesis()
    import pytest

    status = int(pytest.main([*tests, *pytest_args, *_FORCED_ARGS]))
    if status == 0:
        loaded = sys.modules.get(module)
        if loaded is None or (code is not None and not hook.is_mutant(loaded)):
            return NOT_LOADED
    return status


@attrs.define
class _Running:
    job: Job
    pid: int
    started: float
    log: Path
    popen: subprocess.Popen[bytes] | None = None


class Executor:
    """Runs jobs `workers` at a time; `clock` is injectable so deadlines can be tested without waiting."""

    def __init__(
        self,
        root: Path,
        pytest_args: Sequence[str],
        *,
        workers: int = 2,
        spawn: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root = root
        self.pytest_args = tuple(pytest_args)
        self.workers = max(1, workers)
        self.spawn = spawn or not hasattr(os, "fork")
        self.clock = clock
        self._logs = Path(tempfile.mkdtemp(prefix="sgconf-mutation-"))

    def run(self, jobs: Iterable[Job], on_result: Callable[[Result], None] | None = None) -> list[Result]:
        """Run every job; results come back in completion order (and to `on_result` as they finish)."""
        pending = deque(jobs)
        running: list[_Running] = []
        results: list[Result] = []
        try:
            while pending or running:
                while pending and len(running) < self.workers:
                    running.append(self._start(pending.popleft(), len(results) + len(running)))
                for run in list(running):
                    result = self._poll(run)
                    if result is not None:
                        running.remove(run)
                        results.append(result)
                        if on_result is not None:
                            on_result(result)
                if running:
                    time.sleep(_POLL_S)
        finally:
            for run in running:  # interrupted: leave nothing behind
                self._kill(run)
                self._reap(run)
        return results

    # ---- one child ------------------------------------------------------------------------
    def _start(self, job: Job, number: int) -> _Running:
        log = self._logs / f"run-{number}.log"
        if self.spawn:
            spec = {
                "root": str(self.root),
                "path": job.path,
                "module": job.module,
                "tests": list(job.tests),
                "pytest_args": list(self.pytest_args),
                "index": None if job.mutant is None else job.mutant.index,
            }
            with log.open("wb") as out:
                popen = subprocess.Popen(
                    [sys.executable, "-m", "tools.mutation.child", json.dumps(spec)],
                    cwd=self.root,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            return _Running(job, popen.pid, self.clock(), log, popen)
        code = job.code
        if job.mutant is not None and code is None:
            code = mutant_code(self.root, job.path, job.mutant.index)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            status = _CHILD_CRASH
            try:
                os.setsid()
                fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                status = run_tests(self.root, job.path, job.module, job.tests, self.pytest_args, code)
            except BaseException:  # noqa: B036 - anything raised here must end the child, not return into the parent's loop
                import traceback

                traceback.print_exc()
            finally:
                with contextlib.suppress(BaseException):
                    sys.stdout.flush()
                    sys.stderr.flush()
                os._exit(status)
        return _Running(job, pid, self.clock(), log)

    def _exited(self, run: _Running) -> int | None:
        """The exit status if the child ended (not yet reaped, so its group id stays ours), else None."""
        if run.popen is not None:
            return run.popen.poll()
        info = os.waitid(os.P_PID, run.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if info is None:
            return None
        if info.si_code == os.CLD_EXITED:
            return info.si_status
        return 128 + info.si_status  # ended by a signal

    def _poll(self, run: _Running) -> Result | None:
        status = self._exited(run)
        elapsed = self.clock() - run.started
        if status is None:
            if elapsed <= run.job.timeout_s:
                return None
            self._kill(run)
            self._reap(run)
            return Result(run.job, Outcome.TIMEOUT, None, elapsed, self._tail(run.log))
        self._kill(run)  # whatever the tests left running in the child's session
        self._reap(run)
        outcome = {0: Outcome.SURVIVED, NOT_LOADED: Outcome.NOT_LOADED}.get(status, Outcome.KILLED)
        return Result(run.job, outcome, status, elapsed, self._tail(run.log))

    def _kill(self, run: _Running) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(run.pid, signal.SIGKILL)

    def _reap(self, run: _Running) -> None:
        if run.popen is not None:
            run.popen.wait()
        else:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(run.pid, 0)

    @staticmethod
    def _tail(log: Path, limit: int = 4000) -> str:
        """The end of a run's output (kept for a failed baseline's message); the log is removed."""
        try:
            text = log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        finally:
            with contextlib.suppress(OSError):
                log.unlink()
        return text[-limit:]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            for leftover in self._logs.iterdir():
                leftover.unlink()
            self._logs.rmdir()


__all__ = ["Executor", "Job", "Outcome", "Result", "preload", "run_tests"]
