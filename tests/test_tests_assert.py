"""Every test function checks something: an `assert`, `pytest.raises`/`fail`/`warns`, or a call of a helper that does.

A helper is any function of the test suite that itself asserts (directly or through
another helper), or a table of such functions called by key (`CHECKS[name](...)`).
Library checks count too: `torch.testing.assert_close`, `pytester`'s `assert_outcomes`,
anything named `assert_*`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECKING_CALLS = {
    "raises",
    "fail",
    "warns",
    "deprecated_call",
    "fnmatch_lines",
    "re_match_lines",
    "skip",
    "importorskip",
}


def _callee(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Subscript) and isinstance(func.value, ast.Name):
        return f"{func.value.id}[]"
    return ""


def _checks_itself(fn: ast.AST) -> bool:
    for node in ast.walk(fn):
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.Call):
            name = _callee(node)
            if name in CHECKING_CALLS or name.startswith("assert"):
                return True
    return False


def suite_files() -> list[Path]:
    return sorted([*(ROOT / "tests").rglob("*.py"), *(ROOT / "examples").rglob("tests/*.py")])


def unchecked_tests(paths: list[Path]) -> list[str]:
    trees = {path: ast.parse(path.read_text(encoding="utf-8"), str(path)) for path in paths}
    functions = [
        (path, node)
        for path, tree in trees.items()
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]
    checking = {node.name for _, node in functions if _checks_itself(node)}
    while True:  # helpers that call helpers that check
        more = {
            node.name
            for _, node in functions
            if node.name not in checking
            and any(isinstance(c, ast.Call) and _callee(c) in checking for c in ast.walk(node))
        }
        tables = {
            f"{target.id}[]"
            for tree in trees.values()
            for stmt in tree.body
            if isinstance(stmt, (ast.Assign, ast.AnnAssign))
            and isinstance(stmt.value, ast.Dict)
            and stmt.value.values
            and all(isinstance(v, ast.Name) and v.id in checking for v in stmt.value.values)
            for target in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
            if isinstance(target, ast.Name)
        }
        if not (more | tables) - checking:
            break
        checking |= more | tables
    return [
        f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:{node.lineno} {node.name}"
        for path, node in functions
        if node.name.startswith("test_") and node.name not in checking
    ]


def test_every_test_checks_something() -> None:
    assert unchecked_tests(suite_files()) == []


def test_the_check_sees_a_test_that_asserts_nothing(tmp_path: Path) -> None:
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "def helper(x):\n    assert x\n\n"
        "CHECKS = {'a': helper}\n\n"
        "def test_through_helper():\n    helper(1)\n\n"
        "def test_through_table():\n    CHECKS['a'](1)\n\n"
        "def test_nothing():\n    x = 1 + 1\n",
        encoding="utf-8",
    )
    found = unchecked_tests([probe])
    assert [line.split(" ")[-1] for line in found] == ["test_nothing"]


def _getattr_is_not_none(node: ast.AST) -> bool:
    """`assert getattr(...) is not None`: true of any name that imports at all, so it checks nothing."""
    test = node.test if isinstance(node, ast.Assert) else None
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Call)
        and _callee(test.left) == "getattr"
        and [type(op) for op in test.ops] == [ast.IsNot]
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    )


def test_no_test_asserts_only_that_a_name_is_not_none() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in suite_files()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if _getattr_is_not_none(node)
    ]
    assert found == []
    assert _getattr_is_not_none(ast.parse("assert getattr(m, n) is not None").body[0])
