"""The fast way `fix` applies a plan: edit the text at the positions the scan found.

A read is one expression with an exact span in the `ast` tree (`self.server_args.page_size`
from its first character to its last), so replacing that span by the accessor rewrites it
without parsing the module again; an alias statement alone on its lines is removed by
deleting them, and the leading import lines are written anew the way libcst's import
visitor would. That keeps a large module's rewrite close to the cost of the scan itself:
libcst parses a whole module about eight times slower than the C parser, and its import
visitors walk the whole tree.

The result is checked before it is returned: it must parse, and where a statement was
removed, scanning it must find exactly the sites the plan left. Anything else (an emptied block, a statement sharing
its line, an import line with parentheses or a comment to change, imports below the code
that the rewrite made unused) returns None, and the caller applies the same plan with
libcst on the whole module; `tests/tools/test_codemod.py` checks that both agree.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from typing import TYPE_CHECKING

from tools.ratchet.settings import ScanSettings
from tools.ratchet.syntax import parse_any

if TYPE_CHECKING:
    from tools.ratchet.plan import Plan


def _offsets(lines: list[str]) -> list[int]:
    out, total = [], 0
    for line in lines:
        out.append(total)
        total += len(line)
    out.append(total)
    return out


def _removable(lines: list[str], stmt: ast.stmt, col: int) -> tuple[int, int] | None:
    """The lines `(first, last)` (1-based) an alias statement fills alone, None when it shares them."""
    first, last = stmt.lineno, stmt.end_lineno or stmt.lineno
    if lines[first - 1][:col].strip():
        return None
    tail = lines[last - 1].encode("utf-8")[stmt.end_col_offset or 0 :].decode("utf-8", "replace")
    if tail.strip():
        return None  # a `;` or a comment: the libcst path decides
    if first >= 2 and lines[first - 2].lstrip().startswith("#"):
        return None  # a comment above belongs to the statement
    return first, last


def _head(tree: ast.Module) -> list[ast.stmt] | None:
    """The leading docstring and import statements, each alone on its lines; None when one is not."""
    head: list[ast.stmt] = []
    for i, stmt in enumerate(tree.body):
        docstring = (
            i == 0
            and isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Constant)
            and isinstance(stmt.value.value, str)
        )
        if not (docstring or isinstance(stmt, (ast.Import, ast.ImportFrom))):
            break
        head.append(stmt)
    for i, stmt in enumerate(head):
        following = tree.body[i + 1] if i + 1 < len(tree.body) else None
        if following is not None and following.lineno <= (stmt.end_lineno or stmt.lineno):
            return None  # `import a; x = 1`
    return head


def _bound(stmt: ast.Import | ast.ImportFrom) -> list[tuple[ast.alias, str]]:
    if isinstance(stmt, ast.ImportFrom):
        return [(a, a.asname or a.name) for a in stmt.names]
    return [(a, a.asname or a.name.partition(".")[0]) for a in stmt.names]


def _unused_below(tree: ast.Module, head_end: int, old_text: str, new_text: str) -> bool:
    """Whether an import below the code binds a name that only its import line mentions now."""
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)) and stmt.lineno > head_end:
            for _, name in _bound(stmt):
                if _count(name, new_text) <= 1 < _count(name, old_text):
                    return True
    return False


def _import_line(stmt: ast.Import | ast.ImportFrom, names: list[str]) -> str:
    if isinstance(stmt, ast.ImportFrom):
        return f"from {'.' * stmt.level}{stmt.module or ''} import {', '.join(names)}\n"
    return f"import {', '.join(names)}\n"


def _spelled(alias: ast.alias) -> str:
    return f"{alias.name} as {alias.asname}" if alias.asname else alias.name


def _plain_line(lines: list[str], stmt: ast.stmt) -> bool:
    """A one-line statement without parentheses, continuation or comment: safe to write anew."""
    line = lines[stmt.lineno - 1]
    return stmt.end_lineno == stmt.lineno and not any(ch in line for ch in "()#\\;")


def _count(name: str, text: str) -> int:
    return len(re.findall(rf"(?<![\w.]){re.escape(name)}\b", text))


def _used(name: str, text: str) -> bool:
    return _count(name, text) > 0


def _imports(old_text: str, new_text: str, old: ast.Module, needed: frozenset[str], module_name: str) -> str | None:
    """The edits of `tools.ratchet.imports`, made on the text of the leading import block.

    They agree with libcst's AddImportsVisitor: new names go first, sorted, into the first
    `from <module> import` at the top, else into a new line after the leading imports,
    with an empty line before the code below. An import goes when a name it binds was
    used below the imports before the rewrite and is not any more.
    """
    old_lines = old_text.splitlines(keepends=True)
    head = _head(old)
    if head is None:
        return None
    end = (head[-1].end_lineno or head[-1].lineno) if head else 0
    lines = new_text.splitlines(keepends=True)
    if lines[:end] != old_lines[:end]:
        return None  # an edit inside the import block: the libcst path decides
    old_rest, new_rest = "".join(old_lines[end:]), "".join(lines[end:])
    imports = [stmt for stmt in head if isinstance(stmt, (ast.Import, ast.ImportFrom))]
    gone = {name for stmt in imports for _, name in _bound(stmt) if _used(name, old_rest) and not _used(name, new_rest)}
    if _unused_below(old, end, old_text, new_text):
        return None
    out = list(lines[:end])
    kept: dict[int, list[ast.alias]] = {}
    for stmt in imports:
        aliases = [a for a, name in _bound(stmt) if name not in gone]
        kept[id(stmt)] = aliases
        if len(aliases) == len(stmt.names):
            continue
        if not _plain_line(out, stmt):
            return None
        out[stmt.lineno - 1] = _import_line(stmt, [_spelled(a) for a in aliases]) if aliases else ""
    ours = [
        stmt
        for stmt in imports
        if isinstance(stmt, ast.ImportFrom) and stmt.module == module_name and not stmt.level and kept[id(stmt)]
    ]
    have = {a.name for stmt in ours for a in kept[id(stmt)] if not a.asname}
    missing = sorted(needed - have)
    rest = list(lines[end:])
    if missing:
        target = next((stmt for stmt in ours if kept[id(stmt)][0].name != "*"), None)
        if target is not None:
            if not _plain_line(out, target):
                return None
            out[target.lineno - 1] = _import_line(target, [*missing, *(_spelled(a) for a in kept[id(target)])])
        else:
            if not head and lines and (lines[0].startswith("#") or not lines[0].strip()):
                return None  # header comments: libcst keeps them above the new import
            out.append(f"from {module_name} import {', '.join(missing)}\n")
            if rest and rest[0].strip():
                rest.insert(0, "\n")  # an empty line before the code below
    return "".join(out) + "".join(rest)


def text_rewrite(text: str, tree: ast.Module, plan: Plan, module_name: str, settings: ScanSettings) -> str | None:
    """`text` with the plan applied, or None when this way cannot apply it faithfully.

    `tree` is the module's tree from the scan (its positions hold for `text`, lowered or not).
    """
    from tools.ratchet.scanner import scan_module

    lines = text.splitlines(keepends=True)
    if not text.endswith(("\n", "\r")):
        lines[-1:] = [lines[-1] + "\n"] if lines else ["\n"]
    edits: list[tuple[int, int, str]] = []
    starts = _offsets(lines)
    for key, accessor in plan.replace.items():
        (line, col), (end_line, end_col) = plan.spans[key]
        edits.append((starts[line - 1] + col, starts[end_line - 1] + end_col, accessor))
    if plan.remove:
        stmts: dict[tuple[int, int], tuple[ast.stmt, int]] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                char = len(lines[node.lineno - 1].encode("utf-8")[: node.col_offset].decode("utf-8", "replace"))
                stmts[(node.lineno, char)] = (node, char)
        for where in plan.remove:
            found = stmts.get(where)
            if found is None:
                return None
            span = _removable(lines, *found)
            if span is not None:
                edits.append((starts[span[0] - 1], starts[span[1]], ""))
    edits.sort()
    for (_, a_end, _), (b_start, _, _) in zip(edits, edits[1:], strict=False):
        if b_start < a_end:
            return None  # a read inside a removed statement: never planned, but never half-applied
    out, last = [], 0
    flat = "".join(lines)
    for start, end, replacement in edits:
        out.append(flat[last:start])
        out.append(replacement)
        last = end
    out.append(flat[last:])
    new = "".join(out)
    if not text.endswith(("\n", "\r")):
        new = new[:-1]
    try:
        rewritten = _imports(text, new, tree, plan.needed, module_name)
        if rewritten is None:
            return None
        new_tree, new_parsed = parse_any("<rewritten>", rewritten, settings.target_version)
    except (SyntaxError, ValueError, RecursionError):
        return None
    if not plan.remove:
        return rewritten  # each read was one expression's exact span: parsing is check enough
    # a statement went: exactly the sites the plan did not fix must be left
    after = Counter((f.kind, f.field) for f in scan_module(new_tree, new_parsed, settings))
    return rewritten if after == Counter(plan.left) else None
