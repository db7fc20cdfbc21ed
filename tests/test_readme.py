"""The README's Python examples run as written, each in a fresh interpreter."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # starts processes or servers: `make test-fast` leaves it out

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), flags=re.S)


def test_readme_has_python_examples() -> None:
    """The README shows Python, so the test below has something to run."""
    assert len(BLOCKS) >= 4


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_block_runs(block: str, tmp_path: Path) -> None:
    """A README block exits 0 in a fresh interpreter, run from an empty directory."""
    done = subprocess.run(
        [sys.executable, "-c", block],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-3000:]


def _transcripts() -> list[tuple[list[str], list[str]]]:
    """The README's `$ command` transcripts of `sgconf`, each with the output it shows."""
    out: list[tuple[list[str], list[str]]] = []
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("    $ "):
            i += 1
            continue
        commands, shown = [], []
        while i < len(lines) and lines[i].startswith("    "):
            line = lines[i][4:]
            if line.startswith("$ ") and not shown:
                commands.append(line[2:])
            else:
                shown.append(line)
            i += 1
        if all("sgconf " in c or c.startswith("printf ") for c in commands) and any("sgconf " in c for c in commands):
            out.append((commands, shown))
    return out


TRANSCRIPTS = _transcripts()


def test_readme_has_sgconf_transcripts() -> None:
    """The README shows sgconf command lines with their output, so the test below has something to check."""
    assert len(TRANSCRIPTS) >= 4


@pytest.mark.parametrize(("commands", "shown"), TRANSCRIPTS, ids=[c[0][-1][:60] for c in TRANSCRIPTS])
def test_readme_transcript_prints_what_it_shows(commands: list[str], shown: list[str], tmp_path: Path) -> None:
    """Each `$ .venv/bin/sgconf ...` transcript, run as written, prints exactly the lines the README shows."""
    bin_dir = Path(sys.executable).parent
    script = "\n".join(c.replace(".venv/bin/", f"{bin_dir}/") for c in commands)
    done = subprocess.run(
        ["bash", "-c", script + " 2>&1"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )
    assert done.stdout.splitlines() == shown


def test_readme_admin_key_example_runs_on_a_fresh_machine(tmp_path: Path) -> None:
    """The admin-key file example creates its directory and a 0600 key that serve accepts, in a fresh home."""
    from engine.http.auth import KEY_FILE

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    line = next(t.strip() for t in text.splitlines() if "admin.key" in t and t.strip().startswith("mkdir"))
    done = subprocess.run(
        ["bash", "-c", line], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    )
    assert done.returncode == 0, done.stderr
    key = tmp_path / ".config" / "sgconf" / "admin.key"
    assert (key.stat().st_mode & 0o777, key.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    assert KEY_FILE.read(str(key)) == b"s3cret"
