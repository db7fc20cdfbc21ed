"""TOML reading works on Python 3.10, where `tomllib` is missing and `tomli` stands in."""

from __future__ import annotations

import ast
import importlib
import sys
import types
from pathlib import Path

import tools.toml as toml_module

TOOLS = Path(__file__).resolve().parents[2] / "tools"


def test_falls_back_to_tomli_before_3_11(monkeypatch):
    """With a 3.10 version tuple the reader comes from `tomli`."""
    fake = types.ModuleType("tomli")
    fake.loads = lambda text: {"from": "tomli"}  # type: ignore[attr-defined]
    fake.TOMLDecodeError = ValueError  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tomli", fake)
    monkeypatch.setattr(sys, "version_info", (3, 10, 14, "final", 0))
    try:
        reloaded = importlib.reload(toml_module)
        assert reloaded.loads("x = 1") == {"from": "tomli"}
        assert reloaded.TOMLDecodeError is ValueError
    finally:
        monkeypatch.undo()
        importlib.reload(toml_module)
    assert toml_module.loads("x = 1") == {"x": 1}


def test_no_module_under_tools_imports_tomllib_directly():
    """Every TOML read under tools/ goes through the module with the fallback."""
    offenders = []
    for path in TOOLS.rglob("*.py"):
        if path.name == "toml.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n.partition(".")[0] in ("tomllib", "tomli") for n in names):
                offenders.append(str(path.relative_to(TOOLS)))
    assert offenders == []
