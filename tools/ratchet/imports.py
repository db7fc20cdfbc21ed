"""The imports a rewrite needs: accessors added, imports it made unused removed.

Both work on a module's top-level statements only, and libcst's import visitor runs on
the leading import block, never on the whole tree: on a large module that would cost
more than the rewrite itself.
"""

from __future__ import annotations

import ast
from typing import Any

import libcst as cst
import libcst.helpers
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor

from tools.ratchet.syntax import parse_any


def loaded_names(tree: ast.AST) -> set[str]:
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}


def _bound(alias: cst.ImportAlias, *, from_import: bool) -> str:
    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
        return alias.asname.name.value
    if from_import:
        return libcst.helpers.get_full_name_for_node_or_raise(alias.name)
    return libcst.helpers.get_full_name_for_node_or_raise(alias.name).partition(".")[0]


def _without(stmt: cst.BaseStatement, gone: set[str]) -> cst.BaseStatement | None:
    """A top-level import line minus the names in `gone`; None when none is left."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return stmt
    imp = stmt.body[0]
    if not isinstance(imp, (cst.Import, cst.ImportFrom)) or isinstance(imp.names, cst.ImportStar):
        return stmt
    from_import = isinstance(imp, cst.ImportFrom)
    keep = [a for a in imp.names if _bound(a, from_import=from_import) not in gone]
    if len(keep) == len(imp.names):
        return stmt
    if not keep:
        return None
    keep[-1] = keep[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    if isinstance(imp, cst.ImportFrom) and imp.lpar is not None and len(keep) == 1:
        imp = imp.with_changes(lpar=None, rpar=None)
    return stmt.with_changes(body=[imp.with_changes(names=keep)])


def _is_head(stmt: cst.BaseStatement, first: bool) -> bool:
    """A docstring (first only) or an import line: what may stand above the imports `fix` adds."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for small in stmt.body:
        if isinstance(small, (cst.Import, cst.ImportFrom)):
            continue
        if (
            first
            and isinstance(small, cst.Expr)
            and isinstance(small.value, (cst.SimpleString, cst.ConcatenatedString))
        ):
            continue
        return False
    return True


def fix_imports(old: ast.Module, new: cst.Module, needed: frozenset[str], module_name: str) -> cst.Module:
    """Import the accessors the rewrite uses; drop imports whose every use the rewrite removed.

    An import that was unused before the rewrite is not ours to remove, so only names that
    were read before and are read no more go.
    """
    gone = loaded_names(old) - loaded_names(parse_any("<rewritten>", new.code)[0])
    return fix_import_block(new, gone, needed, module_name)


def fix_import_block(new: cst.Module, gone: set[str], needed: frozenset[str], module_name: str) -> cst.Module:
    """`fix_imports` once `gone` (the names no longer read) is known."""
    body = (
        [stmt for stmt in (_without(stmt, gone) for stmt in new.body) if stmt is not None] if gone else list(new.body)
    )
    if not needed:
        return new.with_changes(body=body)
    split = 0
    while split < len(body) and _is_head(body[split], split == 0):
        split += 1
    head: list[Any] = body[:split]
    rest: list[Any] = body[split:]
    if rest:  # a stand-in for the first statement below the imports keeps its blank lines right
        head.append(cst.SimpleStatementLine([cst.Pass()], leading_lines=rest[0].leading_lines))
    context = CodemodContext()
    for name in sorted(needed):
        AddImportsVisitor.add_needed_import(context, module_name, name)
    done = AddImportsVisitor(context).transform_module(new.with_changes(body=head))
    out = list(done.body)
    if rest:
        stand_in = out.pop()
        rest[0] = rest[0].with_changes(leading_lines=stand_in.leading_lines)
    return new.with_changes(body=[*out, *rest])
