"""The repository's shape: which folder may import which, what `import runtime` costs, one HTTP app.

Dependencies point one way, `sgconf` <- `runtime` <- `mem_cache`/`attention` <- `engine`,
and `tools` needs nothing of ours but `sgconf`. Every import counts, at the top of a
module or inside a function, so a lazy import cannot hide a dependency.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RANK = {"sgconf": 0, "runtime": 1, "mem_cache": 2, "attention": 2, "engine": 3}
SAME_RANK_ALLOWED = {("attention", "mem_cache")}
PACKAGES = (*RANK, "tools")


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """Every absolute module an `import`/`from ... import` anywhere in the tree names, with its line."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
            in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            out.append((node.lineno, node.args[0].value))
    return out


def allowed(src: str, dst: str) -> bool:
    if src == dst or dst not in PACKAGES:
        return True
    if src == "tools":
        return dst == "sgconf"
    if dst == "tools":
        return False
    return RANK[dst] < RANK[src] or (src, dst) in SAME_RANK_ALLOWED


def source_files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def test_no_folder_imports_one_to_its_left() -> None:
    """No module of a package imports a package to its left, not even inside a function."""
    bad = []
    for package in PACKAGES:
        for path in source_files(package):
            for line, module in imported_modules(ast.parse(path.read_text(encoding="utf-8"))):
                if not allowed(package, module.split(".")[0]):
                    bad.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert bad == []


def test_the_import_check_catches_a_lazy_import() -> None:
    """A function-level import and an import_module string both count."""
    tree = ast.parse("def f():\n    from engine.engine import Engine\n    importlib.import_module('mem_cache.pools')\n")
    found = imported_modules(tree)
    assert found == [(2, "engine.engine"), (3, "mem_cache.pools")]
    assert not allowed("runtime", "engine") and not allowed("tools", "runtime") and allowed("attention", "mem_cache")


@pytest.mark.slow  # starts a process: `make test-fast` leaves it out
@pytest.mark.parametrize("modules", ["runtime", "sgconf", "runtime, sgconf, engine"])
def test_config_core_imports_no_torch_or_web_stack(modules: str) -> None:
    """`import runtime`, `import sgconf` (and the `engine` package itself) leave torch, fastapi and uvicorn out."""
    code = f"import sys, {modules}; print(sorted(m for m in ('torch', 'fastapi', 'uvicorn') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_one_fastapi_app_in_the_code_base() -> None:
    """Exactly one `FastAPI(` call outside the tests: the one app factory of `engine.http`."""
    calls = []
    for package in PACKAGES:
        for path in source_files(package):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (
                    isinstance(node, ast.Call)
                    and getattr(node.func, "id", getattr(node.func, "attr", None)) == "FastAPI"
                ):
                    calls.append(str(path.relative_to(ROOT)))
    assert calls == ["engine/http/app.py"]


MAX_MODULE_LINES = 600


def test_no_module_is_over_600_lines() -> None:
    """A module that grows past 600 lines is split along its seams, not defended in its docstring."""
    long = []
    for package in PACKAGES:
        for path in source_files(package):
            lines = path.read_text(encoding="utf-8").count("\n")
            if lines > MAX_MODULE_LINES:
                long.append(f"{path.relative_to(ROOT)}: {lines} lines")
    assert long == []


@pytest.mark.slow  # starts a process: `make test-fast` leaves it out
def test_importing_every_runtime_module_leaves_torch_out() -> None:
    """Not only `import runtime`: every module of it, the config group's included, imports torch only when used."""
    names = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts) for p in source_files("runtime") if p.name != "__init__.py"
    )
    code = f"import importlib, sys\nfor m in {names!r}:\n    importlib.import_module(m)\nprint('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"
