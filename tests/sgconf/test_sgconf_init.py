"""The package front door: every exported name imports, and importing sgconf stays light."""

from __future__ import annotations

import subprocess
import sys

import pytest

import sgconf


def test_all_is_sorted_and_unique() -> None:
    """`__all__` is sorted and has no duplicates."""
    assert sgconf.__all__ == sorted(set(sgconf.__all__))


@pytest.mark.parametrize("name", sgconf.__all__)
def test_every_exported_name_imports(name: str) -> None:
    """`from sgconf import <name>` works for every listed name."""
    namespace: dict[str, object] = {}
    exec(f"from sgconf import {name}", namespace)
    assert namespace[name] is getattr(sgconf, name)


@pytest.mark.slow  # starts a process: `make test-fast` leaves it out
def test_import_does_not_pull_heavy_dependencies() -> None:
    """`import sgconf` and `import sgconf.cli` import neither torch, FastAPI, uvicorn nor PyYAML."""
    code = (
        "import sys, sgconf, sgconf.cli, sgconf.loading, sgconf.schema; "
        "print(sorted(m for m in ('torch', 'fastapi', 'uvicorn', 'yaml', 'numpy') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "[]\n", "")
