"""`sgconf-ratchet fix`: rewrite counted raw reads into accessor reads with libcst.

`self.server_args.page_size` and `getattr(sa, "page_size")` become
`get_schedule().page_size`; the accessor's import is added once per module, and imports
the rewrite left unused (`get_server_args`, typically) are removed. An alias
(`sa = get_server_args()`) is rewritten only when every use of it is a field read that
can be rewritten; its binding statement is then removed (unless comments sit on it).

An accessor reads the record the process published, so only a read of that record keeps
its meaning when rewritten. A read through the getter is one. A record an object holds
(`self.server_args`) or a caller passes in (a parameter) may be another one: engines
sharing a process can each carry their own. Those reads are rewritten only when
`ratchet.toml` says `one_record_per_process = true`; otherwise they are listed for
review with the reason. Writes, records built in place (`ServerArgs(...)`,
`dataclasses.replace(...)`), computed `getattr` names, walrus-bound records, aliases used
for anything else and names that hold the record on some paths only are listed, never
touched: rewriting them would change what the code does.

Which sites exist is decided by the scanner (`tools.ratchet.scanner` on `ast`), exactly
as `check` decides it; libcst only finds those nodes again by position and rewrites
them, keeping every comment and blank line.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

import attrs
import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from tools.ratchet.imports import fix_imports
from tools.ratchet.plan import Plan
from tools.ratchet.scanner import Found, allow_comments, collect, scan_module
from tools.ratchet.settings import ScanSettings
from tools.ratchet.sites import FileScan, Site
from tools.ratchet.syntax import NewSyntaxError, parse_any
from tools.ratchet.textfix import text_rewrite

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
    #: reads of a record that may not be the published one: the author decides
    review: tuple[tuple[Site, str], ...] = ()
    #: the scan of `old`, as `check` sees it
    scan: FileScan | None = None

    @property
    def changed(self) -> bool:
        return self.new != self.old


#: why a read of a record that may not be the process's is left for review, by origin
REVIEW_REASONS = {
    "instance": "the record is held per instance here and may not be the process's published one",
    "passed": "the record is passed in here and may not be the process's published one",
}
REVIEW_HINT = "rewrite it by hand, or set one_record_per_process = true in ratchet.toml"
WRITE_REASON = (
    "a write to the record; set the value before publish (a config source or flag), "
    "or after publish through an override (get_context().override(source, field=value))"
)


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
        # an alias statement with comments on it stays: its comment would be lost
        if (
            len(original_node.body) == 1
            and self._pos(original_node.body[0]) in self.remove
            and not _has_comments(original_node)
        ):
            return cst.RemoveFromParent()
        return updated_node

    def leave_IndentedBlock(
        self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        if not updated_node.body:
            return updated_node.with_changes(body=[cst.SimpleStatementLine([cst.Pass()])])
        return updated_node


def _has_comments(line: cst.SimpleStatementLine) -> bool:
    return (
        any(empty.comment is not None for empty in line.leading_lines) or line.trailing_whitespace.comment is not None
    )


def _review(found: Found, per_process: bool) -> str | None:
    """Why a read must be reviewed: its record may not be the published one (None when it is)."""
    if per_process or found.origin not in REVIEW_REASONS:
        return None
    return f"{REVIEW_REASONS[found.origin]} -- {REVIEW_HINT}"


def _problem(
    found: Found,
    accessors: Mapping[str, str | None],
    site_of: Callable[[Found], Site],
    counted: Callable[[Site], bool],
    per_process: bool = False,
) -> str | None:
    """Why `found` cannot be rewritten safely, or None when it can."""
    if found.kind == "write":
        return WRITE_REASON
    if found.kind == "computed":
        return "getattr() with a name computed at run time; read the bag by name (get_context().value(name))"
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
        if read is not found and (read.kind in ("write", "computed") or not accessors.get(read.field)):
            return f"alias '{binding.name}' also has reads that cannot be rewritten"
    return None


def plan_fixes(
    path: str,
    text: str,
    found: Sequence[Found],
    accessors: Mapping[str, str | None],
    exempt: Callable[[Site], bool],
    *,
    per_process: bool = False,
) -> Plan:
    """Decide, for every counted site, its rewrite, or the reason it stays (for review or for good)."""
    scan = collect(path, list(found), allow_comments(text))
    by_position = {(s.line, s.col, s.kind, s.field): s for s in scan.sites}

    def site_of(f: Found) -> Site:
        return by_position[(f.line, f.col, f.kind, f.field)]

    def counted(site: Site) -> bool:
        return site.allowed is None and not exempt(site)

    replace: dict[tuple[str, int, int], str] = {}
    spans: dict[tuple[str, int, int], tuple[tuple[int, int], tuple[int, int]]] = {}
    remove: set[tuple[int, int]] = set()
    needed: set[str] = set()
    fixed: list[Site] = []
    skipped: list[tuple[Site, str]] = []
    review: list[tuple[Site, str]] = []
    for f in sorted(found, key=lambda f: (f.line, f.col)):
        site = site_of(f)
        if not counted(site):
            continue
        reason = _problem(f, accessors, site_of, counted)
        if reason is not None:
            skipped.append((site, reason))
            continue
        why = _review(f, per_process)
        if why is None and f.binding is not None:
            why = next((r for read in f.binding.reads if (r := _review(read, per_process))), None)
        if why is not None:
            review.append((site, why))
            continue
        accessor = accessors[f.field]
        assert accessor is not None
        replace[f.key] = accessor
        spans[f.key] = ((f.line, f.col - 1), f.end)
        needed.add(_ACCESSOR_CALL.match(accessor).group(1))  # type: ignore[union-attr]
        fixed.append(site)
        if f.binding is not None and f.binding.kind == "alias" and f.binding.stmt is not None:
            line, col = f.binding.stmt
            remove.add((line, _char_col(text, line, col)))
    left = tuple((f.kind, f.field) for f in found if f.key not in replace)
    return Plan(
        replace, frozenset(remove), frozenset(needed), tuple(fixed), tuple(skipped), tuple(review), spans, left, scan
    )


def _char_col(text: str, line: int, offset: int) -> int:
    if text.isascii():
        return offset
    return len(text.splitlines()[line - 1].encode("utf-8")[:offset].decode("utf-8", "replace"))


def rewrite(module: cst.Module, plan: Plan) -> tuple[cst.Module, set[tuple[str, int, int]]]:
    """Apply the plan's replacements and removals; returns the new module and the keys rewritten."""
    rewriter = _Rewriter(plan.replace, plan.remove)
    new = MetadataWrapper(module, unsafe_skip_copy=True).visit(rewriter)
    return new, rewriter.done


def fix_text(
    path: str,
    text: str,
    settings: ScanSettings,
    accessors: Mapping[str, str | None],
    *,
    module_name: str = "runtime",
    exempt: Callable[[Site], bool] = lambda site: False,
    per_process: bool = False,
) -> FixResult:
    """Rewrite every counted, safely fixable read in `text`; never raises on bad input.

    `per_process`: the project publishes one record per process, so a record held per
    instance or passed in is that one and its reads may be rewritten too.
    """
    try:
        tree, parsed = parse_any(path, text, settings.target_version)
    except NewSyntaxError as exc:
        return FixResult(path, text, text, error=f"cannot parse: {exc}")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return FixResult(path, text, text, error=f"cannot parse: {_one_line(str(exc))}")
    plan = plan_fixes(path, parsed, scan_module(tree, parsed, settings), accessors, exempt, per_process=per_process)
    if not plan.replace:
        return FixResult(path, text, text, (), plan.skipped, review=plan.review, scan=plan.scan)
    fast = text_rewrite(text, tree, plan, module_name, settings)
    if fast is not None:
        return FixResult(path, text, fast, plan.fixed, plan.skipped, review=plan.review, scan=plan.scan)
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
    return FixResult(path, text, new_text, plan.fixed, plan.skipped, review=plan.review, scan=plan.scan)
