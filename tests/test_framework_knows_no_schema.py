"""The framework names no serving field or namespace and has no schema-less lookup.

Every module of `sgconf/` and `runtime/` outside the serving product (`sgconf/serving/`
and `runtime/serving.py`) is read with `ast`. A string literal equal to a serving field
or namespace name fails, and so does an identifier (a name, an attribute, a function,
class or parameter name) equal to one. Three identifiers are not the serving schema's,
each for a stated reason:

- `model`: the framework's own resolution input (`publish(record, model=...)`, the model
  config a runtime serves), not the serving namespace of that name;
- `exec`: Python's builtin, passed to `compile()` by the accessor factory;
- `port`: the attribute of `torch.distributed.TCPStore` that says where the board listens.

Keyword arguments of calls are not checked: they name the parameters of the library
called (`torch.zeros(..., dtype=...)`), not a field.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from sgconf.serving import SERVING

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("sgconf/serving/", "runtime/serving.py")
NOT_SERVING = {
    "model": "the framework's resolution input",
    "exec": "Python's builtin (compile mode)",
    "port": "torch.distributed.TCPStore.port",
}
# Lookups that answered for a process-wide default schema; they must not come back.
SCHEMA_LESS = {"serving", "set_serving"}


def serving_names() -> set[str]:
    names = set(SERVING.field_names())
    for path in SERVING.namespaces():
        names.add(path)
        names.update(path.split("."))
    return names


def framework_files() -> list[Path]:
    out = []
    for package in ("sgconf", "runtime"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if not rel.startswith(PRODUCT):
                out.append(path)
    return out


def found_names(tree: ast.AST) -> list[tuple[int, str, str]]:
    """Every (line, kind, text) of the tree a serving name could hide in."""
    out: list[tuple[int, str, str]] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append((line, "string", node.value))
        elif isinstance(node, ast.Name):
            out.append((line, "name", node.id))
        elif isinstance(node, ast.Attribute):
            out.append((line, "attribute", node.attr))
        elif isinstance(node, ast.arg):
            out.append((line, "parameter", node.arg))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append((line, "definition", node.name))
    return out


def offences(path: Path, names: set[str]) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    bad = []
    for line, kind, text in found_names(tree):
        if kind == "string" and text in names and text not in NOT_SERVING:
            bad.append(f"{rel}:{line}: string {text!r}")
        elif kind != "string" and text in names and text not in NOT_SERVING:
            bad.append(f"{rel}:{line}: {kind} {text!r}")
        elif kind != "string" and text in SCHEMA_LESS:
            bad.append(f"{rel}:{line}: schema-less lookup {text!r}")
    return bad


def test_the_framework_names_no_serving_field_or_namespace() -> None:
    names = serving_names()
    bad = [line for path in framework_files() for line in offences(path, names)]
    assert bad == []


def test_the_check_sees_a_field_a_namespace_and_a_schema_less_lookup(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text('def f(info):\n    return info.page_size, "memory", registry.set_serving()\n', encoding="utf-8")
    bad = offences(probe, serving_names())
    assert [b.split(": ", 1)[1] for b in bad] == [
        "attribute 'page_size'",
        "string 'memory'",
        "schema-less lookup 'set_serving'",
    ]


@pytest.mark.parametrize("name", sorted(NOT_SERVING))
def test_every_exemption_is_still_needed(name: str) -> None:
    """An exemption no framework module uses any more comes off the list."""
    used = {
        text for path in framework_files() for _, _, text in found_names(ast.parse(path.read_text(encoding="utf-8")))
    }
    assert name in used
