"""No module of ours imports, directly or through others, a module that imports it back.

Imports are read with `ast` from every file of every top-level package, at module level,
inside functions and under `if TYPE_CHECKING:` alike: a lazy import still ties two modules
together, and a type-only import is a dependency of the reader who has to understand both.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file() and p.name != "tests")


def module_names() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ours that `name` imports anywhere in its file."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            # `import a.b.c` names a.b.c; the closest module of ours it reaches is the edge
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def graph() -> dict[str, set[str]]:
    known = module_names()
    return {name: imports_of(name, path, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of two or more modules (Tarjan), each sorted, in name order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for dep in sorted(edges.get(node, ())):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in on_stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_packages_are_found() -> None:
    """The walk sees the packages this check is about."""
    assert {"sgconf", "runtime", "mem_cache", "attention", "tools"} <= set(PACKAGES)
    assert "runtime.context" in graph()


# Cycles known today, to be broken; like the read ratchet's baseline this list may only
# shrink. It is empty: every package imports one way.
KNOWN_CYCLES: list[frozenset[str]] = []


def test_no_import_cycle_inside_any_package() -> None:
    """The import graph of our modules has no cycle beyond the known ones, and none of those grew."""
    found = cycles(graph())
    new = [group for group in found if not any(set(group) <= known for known in KNOWN_CYCLES)]
    assert new == [], "import cycles: " + "; ".join(" <-> ".join(group) for group in new)


def test_known_cycles_are_still_there() -> None:
    """A known cycle that is gone (or smaller) must come off the list, so it cannot come back unseen."""
    found = [frozenset(group) for group in cycles(graph())]
    assert [known for known in KNOWN_CYCLES if known not in found] == []


def test_the_check_sees_a_cycle(tmp_path: Path) -> None:
    """Two modules importing each other, one only inside a function or only for type checking, are a cycle."""
    (tmp_path / "a.py").write_text("import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from a import x\n")
    (tmp_path / "c.py").write_text("import a\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import d\n")
    (tmp_path / "d.py").write_text("import c\n")
    known = {name: tmp_path / f"{name}.py" for name in ("a", "b", "c", "d")}
    edges = {name: imports_of(name, path, known) for name, path in known.items()}
    assert edges == {"a": {"b"}, "b": {"a"}, "c": {"a", "d"}, "d": {"c"}}
    assert cycles(edges) == [["a", "b"], ["c", "d"]]
