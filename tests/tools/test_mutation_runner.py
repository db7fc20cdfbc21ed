"""The mutation runner end to end on a throwaway project: verdicts, report, equivalents, deadlines."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tools.mutation import Executor, Job, Outcome, load_config, mutants_of

pytestmark = pytest.mark.slow  # starts processes or servers: `make test-fast` leaves it out

CALC = """\
def add(a, b):
    return a + b


def is_big(n):
    return n > 100
"""

TESTS = """\
from toy.calc import add, is_big


def test_add():
    assert add(2, 3) == 5


def test_is_big():
    assert is_big(1000) is True
"""


def project(
    root: Path, *, config: str = "", modules: str = '"toy/calc.py" = ["tests/test_calc.py"]', equivalents: str = ""
) -> Path:
    files = {
        "toy/__init__.py": "",
        "toy/calc.py": CALC,
        "toy/unused.py": "LIMIT = 3\n",
        "tests/test_calc.py": TESTS,
        "eq.txt": equivalents,
        "mutation.toml": f'[config]\nworkers = 2\npreload = []\nequivalents = "eq.txt"\n{config}\n[modules]\n{modules}\n',
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root / "mutation.toml"


def mutate(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tools.mutation", "--config", str(root / "mutation.toml"), *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_report_counts_kills_survivors_and_equivalents(tmp_path):
    """Killed, survived and equivalent mutants are counted per module; survivors are listed with file, line and edit."""
    project(
        tmp_path,
        equivalents="# known\ntoy/calc.py is_big: n > 100 -> n >= 100 -- stands in for a real equivalent\n"
        "toy/calc.py is_big: n > 100 -> n < 100 -- a mutant that does not exist\n",
    )
    done = mutate(tmp_path)
    assert done.returncode == 1, done.stderr
    out = done.stdout
    assert "mutate: baseline toy/calc.py: tests/test_calc.py pass in" in out
    assert "module       mutants  killed  timeout  survived  equivalent  killed %" in out
    assert "toy/calc.py        5       3        0         1           1      75.0" in out
    assert "survivors (1):\n  toy/calc.py:6 is_big: n > 100 -> n > 101\n" in out
    assert "entries of eq.txt that name no mutant (the code changed; update or remove them):\n" in out
    assert "  line 3: toy/calc.py is_big: n > 100 -> n < 100 -- a mutant that does not exist" in out
    assert out.rstrip().endswith("below 95% killed: toy/calc.py")
    # the mutants lived only in the children's import systems
    assert (tmp_path / "toy/calc.py").read_text(encoding="utf-8") == CALC


def test_spawn_mode_and_threshold_met(tmp_path):
    """A fresh interpreter per run gives the same verdicts; exit 0 when every module meets the threshold."""
    project(tmp_path, config="threshold = 60.0")
    done = mutate(tmp_path, "--spawn", "toy/calc.py")
    assert done.returncode == 0, done.stderr
    assert "toy/calc.py        5       3        0         2           0      60.0" in done.stdout
    assert "every module at or above 60% killed" in done.stdout


def test_recheck_reports_an_equivalent_that_a_test_kills(tmp_path):
    """With --recheck-equivalents, a listed mutant that is killed is named so the entry can go."""
    project(tmp_path, equivalents="toy/calc.py add: a + b -> a - b -- wrongly listed\n")
    done = mutate(tmp_path, "--recheck-equivalents")
    assert "listed in eq.txt but killed (remove the entry):\n  toy/calc.py:2 add: a + b -> a - b" in done.stdout


def test_list_prints_every_mutant_and_marks_equivalents(tmp_path):
    """--list runs nothing and prints one mutant a line."""
    project(tmp_path, equivalents="toy/calc.py is_big: n > 100 -> n >= 100 -- boundary\n")
    done = mutate(tmp_path, "--list")
    assert done.returncode == 0
    assert done.stdout.splitlines() == [
        "toy/calc.py:2 add: a + b -> a - b",
        "toy/calc.py:2 add: return a + b -> return None",
        "toy/calc.py:6 is_big: n > 100 -> n > 101",
        "toy/calc.py:6 is_big: n > 100 -> n >= 100  [equivalent]",
        "toy/calc.py:6 is_big: return n > 100 -> return None",
    ]


def test_tests_that_never_import_the_module_are_an_error(tmp_path):
    """A mapping whose tests never import the module is refused instead of reporting survivors."""
    project(tmp_path, modules='"toy/unused.py" = ["tests/test_calc.py"]')
    done = mutate(tmp_path)
    assert done.returncode == 2
    assert (
        "mutate: the tests of toy/unused.py never import toy.unused -- list the tests that cover it in mutation.toml"
        in done.stderr
    )


def test_failing_tests_stop_the_run_before_any_mutant(tmp_path):
    """Tests that fail unmutated are reported with their output, exit 2."""
    project(tmp_path)
    (tmp_path / "tests/test_calc.py").write_text(
        TESTS + "\n\ndef test_broken():\n    assert add(1, 1) == 3\n", encoding="utf-8"
    )
    done = mutate(tmp_path)
    assert done.returncode == 2
    assert (
        "mutate: the tests of toy/calc.py fail (exit status 1) without any mutation -- fix them first:" in done.stderr
    )
    assert "1 failed, 2 passed" in done.stderr


def test_unknown_module_and_bad_config_are_usage_errors(tmp_path):
    """A module not in the config, or a bad key, exits 2 with the fix."""
    project(tmp_path)
    done = mutate(tmp_path, "toy/other.py")
    assert done.returncode == 2
    assert "mutate: 'toy/other.py' is not a module of mutation.toml -- pick one of: toy/calc.py" in done.stderr
    project(tmp_path, config="wokers = 2")
    done = mutate(tmp_path)
    assert done.returncode == 2
    assert "mutate: mutation.toml: unknown key 'config.wokers' -- known keys: workers," in done.stderr


# ---- the executor, with an injected clock -------------------------------------------------

HANG = """\
import os
import subprocess
import sys


def test_hang():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.environ["PIDS"], "w") as out:
        out.write(f"{os.getpid()} {child.pid}")
    while True:
        pass
"""


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")  # a zombie is dead, waiting for its parent to reap it


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc to see that processes are gone")
def test_a_run_past_its_deadline_is_a_timeout_and_its_processes_are_killed(tmp_path, monkeypatch):
    """Once the clock passes the deadline the run counts as timed out, and it and its children are killed."""
    project(tmp_path)
    (tmp_path / "tests/test_hang.py").write_text(HANG, encoding="utf-8")
    pids = tmp_path / "pids"
    monkeypatch.setenv("PIDS", str(pids))
    now = [0.0]
    executor = Executor(tmp_path, ["-q", "-p", "no:randomly"], workers=1, spawn=True, clock=lambda: now[0])
    job = Job("toy/calc.py", "toy.calc", ("tests/test_hang.py",), timeout_s=5.0)

    def advance_once_started() -> None:
        # the deadline passes only once the test has started its grandchild (no race with start-up)
        deadline = time.monotonic() + 120
        while not (pids.exists() and pids.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        now[0] = 1000.0

    waiter = threading.Thread(target=advance_once_started)
    waiter.start()
    try:
        [result] = executor.run([job])
    finally:
        waiter.join()
        executor.close()
    assert result.outcome is Outcome.TIMEOUT and result.exit_code is None
    child, grandchild = map(int, pids.read_text().split())
    deadline = time.monotonic() + 60
    while not (_gone(child) and _gone(grandchild)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(child) and _gone(grandchild)


def test_verdicts_follow_pytest_exit_status(tmp_path):
    """Exit 0 is a survivor, any failure a kill; a clock that never moves never times a run out."""
    project(tmp_path)
    config = load_config(tmp_path / "mutation.toml")
    by_key = {m.mutation.description: m for m in mutants_of(config.root, "toy/calc.py")}
    executor = Executor(tmp_path, ["-q", "-x", "-p", "no:randomly"], workers=2, spawn=True, clock=lambda: 0.0)
    jobs = [
        Job("toy/calc.py", "toy.calc", ("tests/test_calc.py",), 1.0, by_key["a + b -> a - b"]),
        Job("toy/calc.py", "toy.calc", ("tests/test_calc.py",), 1.0, by_key["n > 100 -> n > 101"]),
    ]
    try:
        results = executor.run(jobs)
    finally:
        executor.close()
    verdicts = {r.job.mutant.mutation.description: (r.outcome, r.exit_code) for r in results if r.job.mutant}
    assert verdicts == {"a + b -> a - b": (Outcome.KILLED, 1), "n > 100 -> n > 101": (Outcome.SURVIVED, 0)}
