"""Every module parses as Python 3.10 and uses nothing of the standard library newer than 3.10.

pyproject.toml promises `requires-python >= 3.10`; the suite runs on 3.11, so this is what
keeps the promise: 3.10 grammar (no `except*`), `tomllib` only behind a `tomli` fallback,
and none of the names the standard library gained in 3.11.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sgconf", "runtime", "mem_cache", "attention", "engine", "tools", "tests", "benchmarks", "examples")
FLOOR = (3, 10)

# modules and names added to the standard library in 3.11
NEW_MODULES = {"tomllib", "wsgiref.types"}
NEW_NAMES = {
    "typing": {
        "Self",
        "LiteralString",
        "Never",
        "assert_never",
        "assert_type",
        "reveal_type",
        "Required",
        "NotRequired",
        "TypeVarTuple",
        "Unpack",
        "dataclass_transform",
        "clear_overloads",
        "get_overloads",
    },
    "enum": {
        "StrEnum",
        "ReprEnum",
        "EnumCheck",
        "FlagBoundary",
        "verify",
        "member",
        "nonmember",
        "global_enum",
        "property",
    },
    "datetime": {"UTC"},
    "asyncio": {"TaskGroup", "timeout", "timeout_at", "Runner", "Barrier"},
    "contextlib": {"chdir"},
    "hashlib": {"file_digest"},
    "operator": {"call"},
}
NEW_BUILTINS = {"ExceptionGroup", "BaseExceptionGroup"}


def sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES if (ROOT / pkg).is_dir() for p in (ROOT / pkg).rglob("*.py"))


def _guarded(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Inside `try: ... except ImportError` or under an `if sys.version_info >= (3, 11)` test."""
    child, parent = node, parents.get(node)
    while parent is not None:
        if isinstance(parent, ast.Try) and child in parent.body:
            names = {ast.unparse(h.type) for h in parent.handlers if h.type is not None}
            if names & {"ImportError", "ModuleNotFoundError"}:
                return True
        if isinstance(parent, ast.If) and child in parent.body and "version_info" in ast.unparse(parent.test):
            return True
        child, parent = parent, parents.get(parent)
    return False


def problems_in(path: Path, root: Path = ROOT) -> list[str]:
    text = path.read_text(encoding="utf-8")
    rel = path.relative_to(root).as_posix()
    try:
        tree = ast.parse(text, filename=rel, feature_version=FLOOR)
    except SyntaxError as exc:
        return [f"{rel}:{exc.lineno}: not Python {FLOOR[0]}.{FLOOR[1]} syntax: {exc.msg}"]
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in NEW_MODULES and not _guarded(node, parents):
                    found.append(f"{rel}:{node.lineno}: imports {alias.name} without a fallback")
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module in NEW_MODULES and not _guarded(node, parents):
                found.append(f"{rel}:{node.lineno}: imports from {node.module} without a fallback")
            for alias in node.names:
                if alias.name in NEW_NAMES.get(node.module, ()) and not _guarded(node, parents):
                    found.append(f"{rel}:{node.lineno}: {node.module}.{alias.name} is new in 3.11")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.attr in NEW_NAMES.get(node.value.id, ()) and not _guarded(node, parents):
                found.append(f"{rel}:{node.lineno}: {node.value.id}.{node.attr} is new in 3.11")
        elif isinstance(node, ast.Name) and node.id in NEW_BUILTINS:
            found.append(f"{rel}:{node.lineno}: {node.id} is new in 3.11")
    return found


def test_every_module_parses_as_the_floor_and_uses_no_newer_stdlib() -> None:
    """No module of ours needs more than Python 3.10."""
    assert len(sources()) > 100
    assert [p for path in sources() for p in problems_in(path)] == []


@pytest.mark.parametrize(
    ("code", "problem"),
    [
        ("import tomllib\n", "imports tomllib without a fallback"),
        ("from typing import Self\n", "typing.Self is new in 3.11"),
        ("import enum\nclass C(enum.StrEnum): pass\n", "enum.StrEnum is new in 3.11"),
        ("try:\n    pass\nexcept* ValueError:\n    pass\n", "not Python 3.10 syntax"),
        ("raise ExceptionGroup('x', [])\n", "ExceptionGroup is new in 3.11"),
    ],
)
def test_the_check_finds_what_3_10_lacks(tmp_path: Path, code: str, problem: str) -> None:
    """Each kind of 3.11-only use is reported."""
    path = tmp_path / "m.py"
    path.write_text(code, encoding="utf-8")
    assert any(problem in p for p in problems_in(path, tmp_path))


@pytest.mark.parametrize(
    "code",
    [
        "try:\n    import tomllib\nexcept ModuleNotFoundError:\n    import tomli as tomllib\n",
        "import sys\nif sys.version_info >= (3, 11):\n    import tomllib\nelse:\n    import tomli as tomllib\n",
    ],
)
def test_a_guarded_import_is_accepted(tmp_path: Path, code: str) -> None:
    """`tomllib` behind a `tomli` fallback is fine."""
    path = tmp_path / "m.py"
    path.write_text(code, encoding="utf-8")
    assert problems_in(path, tmp_path) == []
