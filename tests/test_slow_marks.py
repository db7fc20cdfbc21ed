"""Every test that starts a process carries the `slow` mark, so `make test-fast` stays fast and in-process.

A test counts as starting one when its body, or a module-level helper it calls, names
`subprocess`, `Popen`, `sys.executable` or `multiprocessing`, or uses `ServeProcess`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPAWNS = ("subprocess.", "Popen", "sys.executable", "multiprocessing", "ServeProcess(", "runpytest_subprocess")


def _is_slow(decorators: list[ast.expr]) -> bool:
    return any("mark.slow" in ast.unparse(d) for d in decorators)


def _module_slow(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
            return "mark.slow" in ast.unparse(node.value)
    return False


def unmarked_spawners(path: Path, root: Path = ROOT) -> list[str]:
    """The tests of `path` that start a process without the slow mark (directly or through a helper)."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    tree = ast.parse(source)
    if _module_slow(tree):
        return []
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    text = {f.name: "\n".join(lines[f.lineno - 1 : f.end_lineno]) for f in functions}
    spawning = {name for name, body in text.items() if any(s in body for s in SPAWNS)}
    found = []
    for test in (f for f in functions if f.name.startswith("test_")):
        calls = {n.func.id for n in ast.walk(test) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        if (test.name in spawning or calls & spawning) and not _is_slow(test.decorator_list):
            found.append(f"{path.relative_to(root)}::{test.name}")
    return found


def test_every_test_that_starts_a_process_is_marked_slow() -> None:
    files = sorted([*ROOT.glob("tests/**/test_*.py"), *ROOT.glob("examples/*/tests/test_*.py")])
    assert len(files) > 100
    unmarked = [name for path in files if path.name != "test_slow_marks.py" for name in unmarked_spawners(path)]
    assert unmarked == [], "mark these @pytest.mark.slow (they start a process): " + ", ".join(unmarked)


def test_the_check_sees_direct_and_helper_spawns(tmp_path: Path) -> None:
    module = tmp_path / "test_probe.py"
    module.write_text(
        "import subprocess\nimport pytest\n\n"
        "def helper():\n    return subprocess.run(['true'])\n\n"
        "def test_direct():\n    subprocess.run(['true'])\n\n"
        "def test_through_a_helper():\n    helper()\n\n"
        "@pytest.mark.slow\ndef test_marked():\n    helper()\n\n"
        "def test_in_process():\n    assert 1\n",
        encoding="utf-8",
    )
    assert unmarked_spawners(module, tmp_path) == ["test_probe.py::test_direct", "test_probe.py::test_through_a_helper"]
