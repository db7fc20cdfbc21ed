"""`sgconf-ratchet fix`: rewrite counted raw reads into accessor reads with libcst.

`self.server_args.page_size` and `getattr(sa, "page_size")` become
`get_schedule().page_size`; the accessor's import is added once per module, and imports
the rewrite left unused (`get_server_args`, typically) are removed. An alias
(`sa = get_server_args()`) is rewritten only when every use of it is a field read that
can be rewritten; its binding statement is then removed (unless comments sit on it).
Writes, records built in place (`ServerArgs(...)`, `dataclasses.replace(...)`: not the
published record, so an accessor would read something else), walrus-bound records,
aliases used for anything else and names that hold the
record on some paths only (branches that bind them differently) are listed, never
touched: rewriting them would change what the code does.

Which sites exist is decided by the scanner (`tools.ratchet.scanner` on `ast`), exactly
as `check` decides it; libcst only finds those nodes again by position and rewrites
them, keeping every comment and blank line.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

import attrs
import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor
from libcst.metadata import MetadataWrapper, PositionProvider

from tools.ratchet.scanner import Found, allow_comments, collect, scan_module
from tools.ratchet.settings import ScanSettings
from tools.ratchet.sites import Site

_ACCESSOR_CALL = re.compile(r"\s*([A-Za-z_]\w*)\s*\(")
# libcst walks its tree recursively; give it room for what CPython itself parses
_DEEP = 200_000


@attrs.frozen(slots=True)
class FixResult:
    """One file's rewrite: the new text (equal to `old` when nothing changed) and what was left."""

    path: str
    old: str
    new: str
    fixed: tuple[Site, ...] = ()
    skipped: tuple[tuple[Site, str], ...] = ()
    error: str | None = None

    @property
    def changed(self) -> bool:
        return self.new != self.old


@attrs.frozen(slots=True)
class Plan:
    """What to change: accessor text per node key, alias statements to drop, names to import."""

    replace: dict[tuple[str, int, int], str]
    remove: frozenset[tuple[int, int]]
    needed: frozenset[str]
    fixed: tuple[Site, ...]
    skipped: tuple[tuple[Site, str], ...]


@contextmanager
def _deep_recursion() -> Iterator[None]:
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, _DEEP))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def _one_line(text: str) -> str:
    return " ".join(text.split())


class _Rewriter(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, replace: Mapping[tuple[str, int, int], str], remove: frozenset[tuple[int, int]]) -> None:
        super().__init__()
        self.replace = replace
        self.remove = remove
        self.done: set[tuple[str, int, int]] = set()
        self._parsed: dict[str, cst.BaseExpression] = {}  # nodes are immutable, so one per accessor

    def _pos(self, node: cst.CSTNode) -> tuple[int, int]:
        pos = self.get_metadata(PositionProvider, node)
        return pos.start.line, pos.start.column

    def _swap(self, key: tuple[str, int, int], updated: cst.BaseExpression) -> cst.BaseExpression:
        text = self.replace.get(key)
        if text is None:
            return updated
        self.done.add(key)
        expr = self._parsed.get(text)
        if expr is None:
            expr = self._parsed[text] = cst.parse_expression(text)
        # keep the parentheses that wrapped the old expression
        return expr.with_changes(lpar=updated.lpar, rpar=updated.rpar)

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        end = self.get_metadata(PositionProvider, original_node.attr).end
        return self._swap(("attr", end.line, end.column), updated_node)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if len(original_node.args) < 2:
            return updated_node
        line, col = self._pos(original_node.args[1].value)
        return self._swap(("str", line, col), updated_node)

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine | cst.RemovalSentinel:
        if len(original_node.body) == 1 and self._pos(original_node.body[0]) in self.remove:
            return cst.RemoveFromParent()
        return updated_node

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        if not updated_node.body:
            return updated_node.with_changes(body=[cst.SimpleStatementLine([cst.Pass()])])
        return updated_node


def _has_comments(line: cst.SimpleStatementLine) -> bool:
    return any(empty.comment is not None for empty in line.leading_lines) or line.trailing_whitespace.comment is not None


def _problem(
    found: Found,
    accessors: Mapping[str, str | None],
    site_of: Callable[[Found], Site],
    counted: Callable[[Site], bool],
) -> str | None:
    """Why `found` cannot be rewritten safely, or None when it can."""
    if found.kind == "write":
        return "a write to the record; change it by hand (post-publish changes go through an override)"
    accessor = accessors.get(found.field)
    if not accessor or _ACCESSOR_CALL.match(accessor) is None:
        return f"no accessor known for '{found.field}'"
    if found.walrus:
        return "the record is also bound by `:=` here"
    if found.built:
        return "the record is built here, not the published one; an accessor would read another value"
    binding = found.binding
    if binding is None:
        return None
    if binding.sources:
        return f"'{binding.name}' holds the record on some paths only"
    if binding.kind != "alias":
        return None
    if binding.flows_out:
        return f"alias '{binding.name}' is also read where branches that bind it differently join"
    if binding.stmt is None:
        return f"alias '{binding.name}' is not bound by a plain `name = ...` statement"
    if binding.uses_other:
        return f"alias '{binding.name}' is used for more than field reads"
    for read in binding.reads:
        if not counted(site_of(read)):
            return f"alias '{binding.name}' also has allowed or exempt reads"
        if read is not found and (read.kind == "write" or not accessors.get(read.field)):
            return f"alias '{binding.name}' also has reads that cannot be rewritten"
    return None


def plan_fixes(
    path: str,
    text: str,
    found: Sequence[Found],
    accessors: Mapping[str, str | None],
    exempt: Callable[[Site], bool],
) -> Plan:
    """Decide, for every counted site, its rewrite or the reason it stays."""
    scan = collect(path, list(found), allow_comments(text))
    by_position = {(s.line, s.col, s.kind, s.field): s for s in scan.sites}

    def site_of(f: Found) -> Site:
        return by_position[(f.line, f.col, f.kind, f.field)]

    def counted(site: Site) -> bool:
        return site.allowed is None and not exempt(site)

    replace: dict[tuple[str, int, int], str] = {}
    remove: set[tuple[int, int]] = set()
    needed: set[str] = set()
    fixed: list[Site] = []
    skipped: list[tuple[Site, str]] = []
    for f in sorted(found, key=lambda f: (f.line, f.col)):
        site = site_of(f)
        if not counted(site):
            continue
        reason = _problem(f, accessors, site_of, counted)
        if reason is not None:
            skipped.append((site, reason))
            continue
        accessor = accessors[f.field]
        assert accessor is not None
        replace[f.key] = accessor
        needed.add(_ACCESSOR_CALL.match(accessor).group(1))  # type: ignore[union-attr]
        fixed.append(site)
        if f.binding is not None and f.binding.kind == "alias" and f.binding.stmt is not None:
            line, col = f.binding.stmt
            remove.add((line, _char_col(text, line, col)))
    return Plan(replace, frozenset(remove), frozenset(needed), tuple(fixed), tuple(skipped))


def _char_col(text: str, line: int, offset: int) -> int:
    if text.isascii():
        return offset
    return len(text.splitlines()[line - 1].encode("utf-8")[:offset].decode("utf-8", "replace"))


def _keep_commented(module: cst.Module, remove: frozenset[tuple[int, int]]) -> frozenset[tuple[int, int]]:
    """Alias statements with comments on them stay (their comment would be lost)."""
    if not remove:
        return remove
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    keep = set()
    for node, pos in positions.items():
        if isinstance(node, cst.SimpleStatementLine) and len(node.body) == 1 and _has_comments(node):
            start = positions[node.body[0]].start
            keep.add((start.line, start.column))
        del pos
    return frozenset(remove - keep)


def rewrite(module: cst.Module, plan: Plan) -> tuple[cst.Module, set[tuple[str, int, int]]]:
    """Apply the plan's replacements and removals; returns the new module and the keys rewritten."""
    rewriter = _Rewriter(plan.replace, _keep_commented(module, plan.remove))
    new = MetadataWrapper(module, unsafe_skip_copy=True).visit(rewriter)
    return new, rewriter.done


def _loaded_names(tree: ast.AST) -> set[str]:
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}


def fix_imports(old: ast.Module, new: cst.Module, needed: frozenset[str], module_name: str) -> cst.Module:
    """Import the accessors the rewrite uses; drop imports whose every use the rewrite removed.

    An import that was unused before the rewrite is not ours to remove, so only names that
    were read before and are read no more go.
    """
    context = CodemodContext()
    for name in sorted(needed):
        AddImportsVisitor.add_needed_import(context, module_name, name)
    gone = _loaded_names(old) - _loaded_names(ast.parse(new.code))
    removals = 0
    for stmt in old.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module and not stmt.level:
            for alias in stmt.names:
                if (alias.asname or alias.name) in gone:
                    RemoveImportsVisitor.remove_unused_import(context, stmt.module, alias.name, alias.asname)
                    removals += 1
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if (alias.asname or alias.name.partition(".")[0]) in gone:
                    RemoveImportsVisitor.remove_unused_import(context, alias.name, None, alias.asname)
                    removals += 1
    new = AddImportsVisitor(context).transform_module(new)
    # the removal visitor runs a full scope analysis: only pay for it when there is work
    return RemoveImportsVisitor(context).transform_module(new) if removals else new


def fix_text(
    path: str,
    text: str,
    settings: ScanSettings,
    accessors: Mapping[str, str | None],
    *,
    module_name: str = "runtime",
    exempt: Callable[[Site], bool] = lambda site: False,
) -> FixResult:
    """Rewrite every counted, safely fixable read in `text`; never raises on bad input."""
    try:
        tree = ast.parse(text, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return FixResult(path, text, text, error=f"cannot parse: {_one_line(str(exc))}")
    plan = plan_fixes(path, text, scan_module(tree, text, settings), accessors, exempt)
    if not plan.replace:
        return FixResult(path, text, text, (), plan.skipped)
    with _deep_recursion():
        try:
            module = cst.parse_module(text)
            new, done = rewrite(module, plan)
            new_text = fix_imports(tree, new, plan.needed, module_name).code
        except (cst.ParserSyntaxError, RecursionError) as exc:
            return FixResult(path, text, text, error=f"cannot rewrite: {_one_line(str(exc))}")
    missing = set(plan.replace) - done
    if missing:  # a site libcst could not find again: refuse rather than half-fix the file
        where = ", ".join(f"line {line}" for _, line, _ in sorted(missing, key=lambda k: k[1]))
        return FixResult(path, text, text, error=f"cannot rewrite: sites not found by position ({where})")
    return FixResult(path, text, new_text, plan.fixed, plan.skipped)
