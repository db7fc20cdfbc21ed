"""The framework installs without torch: `pip install sgconf` runs the CLI, the ratchet and a runtime of its own.

One test builds a fresh virtual environment for real (pip's cache makes later runs
quick) and installs a copy of the sources without any extra; the serving runtime's
torch comes only with the `serving` extra.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # starts processes or servers: `make test-fast` leaves it out

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sgconf", "runtime", "tools", "mem_cache", "attention", "engine")


def _run(args: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "SGCONF_", "VIRTUAL_ENV"))}
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=env, timeout=timeout, check=False)


@pytest.mark.timeout(1200)
def test_framework_install_has_no_torch_and_runs_cli_ratchet_and_minirt(tmp_path: Path) -> None:
    """A plain install brings no torch, and `sgconf show`, `sgconf-ratchet check` and minirt's tests pass in it."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / "bin"
    python = str(bin_dir / "python")
    install = _run([python, "-m", "pip", "install", "-q", str(src), "pytest>=7.4"], tmp_path)
    assert install.returncode == 0, install.stderr[-3000:]

    probe = _run([python, "-c", "import importlib.util as u; print(u.find_spec('torch') is None)"], tmp_path)
    assert probe.stdout.strip() == "True", "the framework install pulled torch"

    show = _run([str(bin_dir / "sgconf"), "show", "--format", "json", "--page-size", "16"], tmp_path)
    assert show.returncode == 0, show.stderr
    assert '"page_size": 16' in show.stdout

    minirt = tmp_path / "minirt"
    shutil.copytree(
        ROOT / "examples" / "minirt", minirt, ignore=shutil.ignore_patterns("__pycache__", ".sgconf-ratchet-cache")
    )
    check = _run([str(bin_dir / "sgconf-ratchet"), "check", "--no-cache"], minirt)
    assert (check.returncode, check.stdout.splitlines()[-1:]) == (
        0,
        ["sgconf-ratchet: 4 files checked, 0 counted sites in 0 files: ok"],
    ), check.stderr

    tests = _run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(minirt), "tests"], minirt)
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-2000:]
    assert " passed" in tests.stdout.splitlines()[-1]
