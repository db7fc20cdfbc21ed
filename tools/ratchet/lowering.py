"""Lowering newer grammar in place, character for character, so the C parser reads it.

See `tools.ratchet.syntax` for why and what; this module holds the libcst half, imported
only when a file needs it.
"""

from __future__ import annotations

import ast
import bisect
import sys

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from tools.ratchet.errors import NewSyntaxError

#: the Python that introduced each lowered construct
_SINCE = {"type parameters": (3, 12), "a type alias statement": (3, 12), "this f-string": (3, 12), "except*": (3, 11)}


def _version(target_version: str) -> tuple[int, int] | None:
    if not target_version:
        return None
    major, _, minor = target_version.partition(".")
    return int(major), int(minor)


class _Lowering(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, target: tuple[int, int] | None, *, every_string: bool = False) -> None:
        super().__init__()
        self.target = target
        self.every_string = every_string
        # (start, end, action): positions are (line, col) with 1-based lines, 0-based columns
        self.edits: list[tuple[tuple[int, int], tuple[int, int], str, object]] = []

    def _span(self, node: cst.CSTNode) -> tuple[tuple[int, int], tuple[int, int]]:
        pos = self.get_metadata(PositionProvider, node)
        return (pos.start.line, pos.start.column), (pos.end.line, pos.end.column)

    def _needs(self, what: str, node: cst.CSTNode) -> None:
        version_needed = _SINCE[what]
        if self.target is not None and self.target < version_needed:
            (line, col), _ = self._span(node)
            version = ".".join(map(str, version_needed))
            target = ".".join(map(str, self.target))
            msg = f"Python {version} syntax ({what}), but target_version is {target} (line {line}, column {col + 1})"
            raise NewSyntaxError(msg)

    def visit_TypeParameters(self, node: cst.TypeParameters) -> None:
        self._needs("type parameters", node)
        start, end = self._span(node)
        self.edits.append((start, end, "blank", None))

    def visit_TypeAlias(self, node: cst.TypeAlias) -> bool:
        self._needs("a type alias statement", node)
        start, _ = self._span(node)
        value_start, _ = self._span(node.value)
        self.edits.append((start, value_start, "alias", node.name.value))
        return True

    def visit_TryStar(self, node: cst.TryStar) -> None:
        self._needs("except*", node)
        if sys.version_info < (3, 11):
            for handler in node.handlers:
                start, _ = self._span(handler)
                star = (start[0], start[1] + len("except"))
                self.edits.append((star, (star[0], star[1] + 1), "blank", None))

    def visit_ConcatenatedString(self, node: cst.ConcatenatedString) -> bool:
        return self._string(node)

    def visit_FormattedString(self, node: cst.FormattedString) -> bool:
        return self._string(node)

    def _string(self, node: cst.BaseExpression) -> bool:
        if not _has_fstring(node):
            return False  # plain strings, concatenated or not: the C parser reads them
        code = cst.Module([]).code_for_node(node)
        try:
            ast.parse(f"({code})", mode="eval")
            if not self.every_string:
                return False  # the C parser reads this string as it is
        except SyntaxError:
            self._needs("this f-string", node)
        start, end = self._span(node)
        keep = [self._span(expr) for expr in _expressions(node)]
        self.edits.append((start, end, "tuple", keep))
        return False


def _has_fstring(node: cst.CSTNode) -> bool:
    if isinstance(node, cst.FormattedString):
        return True
    if isinstance(node, cst.ConcatenatedString):
        return _has_fstring(node.left) or _has_fstring(node.right)
    return False


def _expressions(node: cst.CSTNode) -> list[cst.BaseExpression]:
    """Every expression embedded in an f-string (format specs included), outermost first."""
    out: list[cst.BaseExpression] = []
    stack: list[cst.CSTNode] = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.ConcatenatedString):
            stack += [current.right, current.left]
        elif isinstance(current, cst.FormattedString):
            stack += list(reversed(current.parts))
        elif isinstance(current, cst.FormattedStringExpression):
            out.append(current.expression)
            if current.format_spec:
                stack += list(reversed(current.format_spec))
    return out


def lower(text: str, target_version: str = "", *, every_string: bool = False) -> str | None:
    """`text` with every construct the C parser cannot read lowered in place; None when there is none.

    `every_string` lowers every string that holds an f-string, also those the C parser
    reads: the tests use it to check that a lowered file scans exactly like the original.
    Raises libcst.ParserSyntaxError when libcst cannot parse it either, NewSyntaxError
    for grammar newer than `target_version`.
    """
    module = cst.parse_module(text)
    visitor = _Lowering(_version(target_version), every_string=every_string)
    MetadataWrapper(module, unsafe_skip_copy=True).visit(visitor)
    if not visitor.edits:
        return None
    lines = [list(line) for line in text.splitlines(keepends=True)]
    for start, end, action, data in visitor.edits:
        cells = _cells(lines, start, end)
        if action == "blank":
            _blank(lines, cells)
        elif action == "alias":
            _blank(lines, cells)
            name = str(data)
            (line, col), last = cells[0], cells[-1]
            for i, ch in enumerate(name):
                lines[line - 1][col + i] = ch
            lines[last[0] - 1][last[1]] = "="
        else:
            _lower_string(lines, cells, data)  # type: ignore[arg-type]
    return "".join("".join(line) for line in lines)


def _cells(lines: list[list[str]], start: tuple[int, int], end: tuple[int, int]) -> list[tuple[int, int]]:
    """Every (line, col) from `start` up to `end` (exclusive)."""
    out = []
    line, col = start
    while (line, col) < end:
        if col >= len(lines[line - 1]):
            line, col = line + 1, 0
            continue
        out.append((line, col))
        col += 1
    return out


def _blank(lines: list[list[str]], cells: list[tuple[int, int]]) -> None:
    for line, col in cells:
        if lines[line - 1][col] not in "\r\n":
            lines[line - 1][col] = " "


def _lower_string(
    lines: list[list[str]], cells: list[tuple[int, int]], keep: list[tuple[tuple[int, int], tuple[int, int]]]
) -> None:
    """Blank a string except its expressions; parenthesise it and separate them with commas."""
    kept: set[tuple[int, int]] = set()
    for start, end in keep:
        kept.update(_cells(lines, start, end))
    _blank(lines, [c for c in cells if c not in kept])
    first, last = cells[0], cells[-1]
    lines[first[0] - 1][first[1]] = "("
    lines[last[0] - 1][last[1]] = ")"
    for _, end in keep:
        i = bisect.bisect_left(cells, end)
        # the first blanked, non-newline cell after the expression becomes its comma
        while i < len(cells) - 1:
            line, col = cells[i]
            if (line, col) not in kept and lines[line - 1][col] not in "\r\n":
                lines[line - 1][col] = ","
                break
            i += 1
