"""Adopting the ratchet on an existing code base: init, the report's totals, refusals, pipes, paths."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.ratchet.baseline import REFUSAL_LINES

PROJECT = Path(__file__).resolve().parents[2]


def _reads(n: int, field: str = "page_size") -> str:
    return "def f(server_args):\n" + "".join(f"    x{i} = server_args.{field}\n" for i in range(n))


def test_init_writes_the_first_baseline_and_check_passes(repo):
    """init records every counted site in one step; check is then clean and init refuses a second time."""
    repo.write("pkg/a.py", _reads(3))
    repo.write("pkg/b.py", "def g(self):\n    return self.server_args.tp_size\n")
    repo.write("pkg/c.py", "x = 1\n")
    assert repo.run("check")[0] == 1
    code, out, err = repo.run("init")
    assert (code, err) == (0, "")
    assert out == (
        "sgconf-ratchet: wrote the first baseline: 4 counted site(s) in 2 of 3 file(s); "
        "from now on counts may only go down (`sgconf-ratchet update` tightens)\n"
    )
    assert repo.read("ratchet.toml").endswith(
        '[counts."pkg/a.py"]\nparameter = 3\n\n[counts."pkg/b.py"]\nattribute = 1\n'
    )
    assert repo.run("check")[0] == 0
    code, _, err = repo.run("init")
    assert code == 2
    assert err == (
        "sgconf-ratchet: ratchet.toml already holds a baseline (4 counted site(s)) -- tighten it with "
        "`sgconf-ratchet update`; init only writes the first one\n"
    )


def test_init_creates_a_config_where_there_is_none(tmp_path, capsys, monkeypatch):
    """Without any ratchet.toml, init writes one with the default globs and the baseline below it."""
    from tools.ratchet.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "m.py").write_text(_reads(2), encoding="utf-8")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_m.py").write_text(_reads(5), encoding="utf-8")
    assert main(["init"]) == 2  # without the schema it would baseline against fields it cannot know
    assert capsys.readouterr().err == (
        "sgconf-ratchet: init needs your schema to write ratchet.toml, or the ratchet would not know your "
        "record's fields -- pass --field-source your_package.config:SCHEMA\n"
    )
    assert not (tmp_path / "ratchet.toml").exists()
    assert main(["init", "--field-source", "sgconf:SERVING"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "sgconf-ratchet: created ratchet.toml and wrote the first baseline: 2 counted site(s) in 1 of 1 file(s)"
    )
    text = (tmp_path / "ratchet.toml").read_text(encoding="utf-8")
    assert '[config]\nfield_source = "sgconf:SERVING"\ninclude = ["**/*.py"]' in text
    assert text.endswith('[counts."app/m.py"]\nparameter = 2\n')
    assert main(["check"]) == 0


def test_init_refuses_while_a_file_does_not_parse(repo):
    """A first baseline over a file that cannot be parsed would be wrong, so nothing is written."""
    repo.write("pkg/bad.py", "def f(:\n")
    before = repo.read("ratchet.toml")
    code, out, err = repo.run("init")
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == "sgconf-ratchet: no baseline written -- fix the files above first"
    assert repo.read("ratchet.toml") == before


def test_summary_counts_sites_and_files_not_problems(repo):
    """The last line gives the real number of counted sites and of files holding them."""
    for i in range(3):
        repo.write(f"pkg/m{i}.py", _reads(4) + "def g(self):\n    return self.server_args.tp_size\n")
    code, out, _ = repo.run("check")
    assert code == 1
    lines = out.splitlines()
    assert len([line for line in lines if "read raw" in line]) == 15
    assert lines[-1] == "sgconf-ratchet: 3 files checked, 15 counted sites in 3 files: 15 over the baseline in 3 files"


def test_refusal_is_grouped_and_short(repo):
    """A refusal over hundreds of files lists a few, says how many more, and stays under 2 KB."""
    for i in range(200):
        repo.write(
            f"pkg/very/long/package/path/module_number_{i:03d}.py", _reads(2) + "y = get_server_args().tp_size\n"
        )
    repo.config('\n[counts."pkg/other.py"]\ndirect = 1\n')
    code, out, err = repo.run("update")
    assert (code, out) == (1, "")
    assert len(err.encode()) <= 2048
    lines = err.splitlines()
    assert lines[0] == "sgconf-ratchet: update refuses to raise the baseline: 600 more counted site(s) in 200 file(s)"
    assert lines[1] == "  pkg/very/long/package/path/module_number_000.py: direct 0 \u2192 1, parameter 0 \u2192 2"
    assert lines[1 + REFUSAL_LINES] == f"  and {200 - REFUSAL_LINES} more file(s)"
    assert (
        lines[-1]
        == "-- fix the reads, or accept the rise with `sgconf-ratchet update --allow-increase --reason '<why>'`"
    )


def test_paths_outside_the_project_are_refused(repo, tmp_path_factory):
    """A file outside the directory of ratchet.toml has no baseline key: a usage error, not a `a//tmp` path."""
    outside = tmp_path_factory.mktemp("elsewhere") / "m.py"
    outside.write_text(_reads(1), encoding="utf-8")
    for command in ("check", "fix"):
        code, out, err = repo.run(command, str(outside))
        assert (code, out) == (2, "")
        assert err.startswith(f"sgconf-ratchet: '{outside}' is outside the project root {repo.root.resolve()}")


@pytest.mark.slow  # starts a process: `make test-fast` leaves it out
def test_closed_pipe_ends_quietly(repo):
    """`check --format sarif | head -1` ends without a BrokenPipeError traceback."""
    repo.write("pkg/big.py", _reads(3000))
    env = dict(os.environ, PYTHONPATH=str(PROJECT))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from tools.ratchet.cli import main; raise SystemExit(main())",
            "check",
            "--format",
            "sarif",
            "--no-cache",
        ],
        cwd=repo.root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline() == b"{\n"
    proc.stdout.close()  # the output is far larger than a pipe buffer, so the writer hits EPIPE
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=240) == 1
    assert err == ""
