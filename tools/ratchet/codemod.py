"""`sgconf-ratchet fix`: rewrite counted raw reads into accessor reads with libcst.

`self.server_args.page_size` and `getattr(sa, "page_size")` become
`get_schedule().page_size`; the accessor's import is added once per module. An alias
(`sa = get_server_args()`) is rewritten only when every use of it is a field read that
can be rewritten; its binding statement is then removed (unless comments sit on it).
Writes, walrus-bound records, aliases used for anything else and names that hold the
record on some paths only (branches that bind them differently) are listed, never
touched: rewriting them would change what the code does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import attrs
import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor

from tools.ratchet.scanner import Found, analyze, collect
from tools.ratchet.settings import ScanSettings
from tools.ratchet.sites import Site

_ACCESSOR_CALL = re.compile(r"\s*([A-Za-z_]\w*)\s*\(")


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


class _Rewriter(cst.CSTTransformer):
    def __init__(self, replace: dict[int, cst.BaseExpression], remove: set[int]) -> None:
        super().__init__()
        self.replace = replace
        self.remove = remove

    def _swap(self, original: cst.BaseExpression, updated: cst.BaseExpression) -> cst.BaseExpression:
        new = self.replace.get(id(original))
        if new is None:
            return updated
        # keep the parentheses that wrapped the old expression
        return new.with_changes(lpar=updated.lpar, rpar=updated.rpar)

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        return self._swap(original_node, updated_node)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        return self._swap(original_node, updated_node)

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine | cst.RemovalSentinel:
        if id(original_node) in self.remove:
            return cst.RemoveFromParent()
        return updated_node

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        if not updated_node.body:
            return updated_node.with_changes(body=[cst.SimpleStatementLine([cst.Pass()])])
        return updated_node


def _has_comments(line: cst.SimpleStatementLine) -> bool:
    return any(empty.comment is not None for empty in line.leading_lines) or line.trailing_whitespace.comment is not None


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
        module = cst.parse_module(text)
    except (cst.ParserSyntaxError, RecursionError, ValueError) as exc:
        return FixResult(path, text, text, error=f"cannot parse: {' '.join(str(exc).split())}")
    wrapper, visitor = analyze(module, settings)
    scan = collect(path, visitor)
    site_of: dict[int, Site] = {}
    for found in visitor.found:
        site = next(s for s in scan.sites if (s.line, s.col, s.kind, s.field) == (found.line, found.col, found.kind, found.field))
        site_of[id(found)] = site
    counted = [f for f in visitor.found if site_of[id(f)].allowed is None and not exempt(site_of[id(f)])]

    def problem(found: Found) -> str | None:
        if found.kind == "write":
            return "a write to the record; change it by hand (post-publish changes go through an override)"
        accessor = accessors.get(found.field)
        if not accessor or _ACCESSOR_CALL.match(accessor) is None:
            return f"no accessor known for '{found.field}'"
        if isinstance(found.base, cst.NamedExpr):
            return "the record is also bound by `:=` here"
        binding = found.binding
        if binding is not None and binding.sources:
            return f"'{binding.name}' holds the record on some paths only"
        if binding is not None and binding.kind == "alias":
            if binding.flows_out:
                return f"alias '{binding.name}' is also read where branches that bind it differently join"
            if binding.stmt is None:
                return f"alias '{binding.name}' is not bound by a plain `name = ...` statement"
            if binding.uses_other:
                return f"alias '{binding.name}' is used for more than field reads"
            for read in binding.reads:
                if site_of[id(read)].allowed is not None or exempt(site_of[id(read)]):
                    return f"alias '{binding.name}' also has allowed or exempt reads"
                if read is not found and (read.kind == "write" or not accessors.get(read.field)):
                    return f"alias '{binding.name}' also has reads that cannot be rewritten"
        return None

    replace: dict[int, cst.BaseExpression] = {}
    remove: set[int] = set()
    needed: set[str] = set()
    fixed: list[Site] = []
    skipped: list[tuple[Site, str]] = []
    for found in counted:
        reason = problem(found)
        site = site_of[id(found)]
        if reason is not None:
            skipped.append((site, reason))
            continue
        accessor = accessors[found.field]
        assert accessor is not None
        replace[id(found.node)] = cst.parse_expression(accessor)
        needed.add(_ACCESSOR_CALL.match(accessor).group(1))  # type: ignore[union-attr]
        fixed.append(site)
        binding = found.binding
        if binding is not None and binding.kind == "alias" and binding.stmt is not None and not _has_comments(binding.stmt):
            remove.add(id(binding.stmt))
    if not replace:
        return FixResult(path, text, text, (), tuple(skipped))
    new_module = wrapper.module.visit(_Rewriter(replace, remove))
    context = CodemodContext()
    for name in sorted(needed):
        AddImportsVisitor.add_needed_import(context, module_name, name)
    new_module = AddImportsVisitor(context).transform_module(new_module)
    return FixResult(path, text, new_module.code, tuple(fixed), tuple(skipped))
