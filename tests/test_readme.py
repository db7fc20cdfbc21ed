"""The README's Python examples run as written, each in a fresh interpreter."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), flags=re.S)


def test_readme_has_python_examples() -> None:
    """The README shows Python, so the test below has something to run."""
    assert len(BLOCKS) >= 4


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_block_runs(block: str, tmp_path: Path) -> None:
    """A README block exits 0 in a fresh interpreter, run from an empty directory."""
    done = subprocess.run(
        [sys.executable, "-c", block], capture_output=True, text=True, cwd=tmp_path, timeout=600,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
