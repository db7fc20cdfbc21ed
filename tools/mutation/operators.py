"""Mutation operators: the small edits to a module's AST that a test suite should notice.

One visitor both lists the mutations of a module and applies one of them, so the
numbering used to name a mutant and the numbering used to build it can never drift
apart: every opportunity is offered in the same order in both passes, and only the one
whose index is the target is taken.

What is mutated: arithmetic and bitwise operators (also in `x += y`), comparisons,
`and`/`or`, `not x` and `-x`, numbers (`n -> n + 1`) and booleans, and, inside function
bodies, simple statements (removed) and returned values (`return None`).

What is left alone: strings, docstrings and f-strings (messages are pinned by exact
message tests, and a mutated message says nothing about behaviour), annotations,
decorators (`@attrs.frozen(slots=True)` flipped is rarely behaviour), `if TYPE_CHECKING`
blocks, imports, and module- or class-level statements (removing a definition only
breaks the import, which says nothing about the tests).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence

import attrs

# one replacement per operator, chosen so that the mutant is rarely equivalent
_BINOP_SWAPS: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Mult,
    ast.Mod: ast.FloorDiv,
    ast.Pow: ast.Mult,
    ast.LShift: ast.RShift,
    ast.RShift: ast.LShift,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
    ast.BitXor: ast.BitAnd,
}

_COMPARE_SWAPS: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}

# simple statements whose removal (replacement by `pass`) inside a function is a mutant
_REMOVABLE = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Raise, ast.Delete, ast.Continue, ast.Break)

_MAX_TEXT = 72


@attrs.frozen(slots=True)
class Mutation:
    """One edit: where it is (line, enclosing scope), which operator made it, and the code before and after."""

    index: int
    line: int
    scope: str
    operator: str
    before: str
    after: str

    @property
    def description(self) -> str:
        return f"{self.before} -> {self.after}"


def _text(node: ast.AST) -> str:
    """One line of source for a node, shortened so reports stay readable."""
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 3] + "..."


def _is_string(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _is_main_guard(test: ast.expr) -> bool:
    return isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"


class _Mutator(ast.NodeTransformer):
    """Offers every mutation in a fixed order; applies the one numbered `target` (None: apply none)."""

    def __init__(self, target: int | None) -> None:
        self.target = target
        self.found: list[Mutation] = []
        self._scope: list[str] = []
        self._functions = 0
        self._parents: list[ast.AST] = []

    def visit(self, node: ast.AST) -> ast.AST:  # type: ignore[override]
        self._parents.append(node)
        try:
            return super().visit(node)  # type: ignore[no-any-return]
        finally:
            self._parents.pop()

    # ---- bookkeeping ---------------------------------------------------------------------
    def _offer(
        self, node: ast.AST, operator: str, before: ast.AST, after: Callable[[], ast.AST], shown: ast.AST | None = None
    ) -> ast.AST:
        """Record a mutation of `node`; return the replacement when it is the target, else `node`.

        `before` is what the report shows; `after` builds the replacement; `shown` is
        what the report shows for the replacement when it differs from it.
        """
        index = len(self.found)
        replacement = after()
        self.found.append(
            Mutation(
                index=index,
                line=getattr(node, "lineno", 0),
                scope=".".join(self._scope) or "<module>",
                operator=operator,
                before=_text(before),
                after=_text(shown if shown is not None else replacement),
            )
        )
        if index != self.target:
            return node
        return ast.fix_missing_locations(ast.copy_location(replacement, node))

    def _visit_list(self, nodes: Sequence[ast.AST]) -> list[ast.AST]:
        out: list[ast.AST] = []
        for node in nodes:
            result = self.visit(node)
            if result is None:
                continue
            out.extend(result if isinstance(result, list) else [result])
        return out

    # ---- scopes and what is never mutated ---------------------------------------------------
    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST:
        # defaults are evaluated in the enclosing scope; annotations and decorators are left alone
        node.args.defaults = self._visit_list(node.args.defaults)  # type: ignore[assignment]
        node.args.kw_defaults = [None if d is None else self.visit(d) for d in node.args.kw_defaults]  # type: ignore[misc]
        self._scope.append(node.name)
        self._functions += 1
        node.body = self._visit_body(node.body)  # type: ignore[assignment]
        self._functions -= 1
        self._scope.pop()
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        return self._visit_function(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> ast.AST:
        return self._visit_function(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        self._scope.append(node.name)
        node.body = self._visit_body(node.body)  # type: ignore[assignment]
        self._scope.pop()
        return node

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        node.body = self.visit(node.body)  # type: ignore[assignment]
        return node

    def _visit_body(self, body: list[ast.stmt]) -> list[ast.AST]:
        if body and isinstance(body[0], ast.Expr) and _is_string(body[0].value):
            return [body[0], *self._visit_list(body[1:])]  # the docstring
        return self._visit_list(body)

    def visit_If(self, node: ast.If) -> ast.AST:
        if _is_type_checking(node.test) or _is_main_guard(node.test):
            node.orelse = self._visit_list(node.orelse)  # type: ignore[assignment]
            return node
        return self.generic_visit(node)

    def _leave_alone(self, node: ast.AST) -> ast.AST:
        """Nothing in it is mutated, and its children are not visited."""
        return node

    # f-strings, parameters, imports and scope declarations are never mutated
    visit_JoinedStr = visit_arg = visit_Import = visit_ImportFrom = visit_Global = visit_Nonlocal = _leave_alone

    # ---- expressions ------------------------------------------------------------------------
    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        if _is_string(node.left) or _is_string(node.right):
            return node  # string concatenation or %-formatting
        self.generic_visit(node)
        swap = _BINOP_SWAPS.get(type(node.op))
        if swap is None:
            return node
        return self._offer(node, "binop", node, lambda: ast.BinOp(left=node.left, op=swap(), right=node.right))

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        result: ast.AST = node
        for position, op in enumerate(node.ops):
            swap = _COMPARE_SWAPS.get(type(op))
            if swap is None:
                continue

            def build(position: int = position, swap: type[ast.cmpop] = swap) -> ast.AST:
                ops = list(node.ops)
                ops[position] = swap()
                return ast.Compare(left=node.left, ops=ops, comparators=list(node.comparators))

            taken = self._offer(node, "compare", node, build)
            if taken is not node:
                result = taken
        return result

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        swap: type[ast.boolop] = ast.Or if isinstance(node.op, ast.And) else ast.And
        return self._offer(node, "boolop", node, lambda: ast.BoolOp(op=swap(), values=list(node.values)))

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, (ast.Not, ast.USub)):
            return self._offer(node, "unary", node, lambda: node.operand)
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        value = node.value
        new: bool | int | float
        if isinstance(value, bool):
            new = not value
        elif isinstance(value, (int, float)) and not isinstance(value, complex):
            new = value + 1
        else:
            return node  # strings, bytes, None, Ellipsis
        # a bare number says little in a report: show it in its parent expression
        parent = self._parents[-2] if len(self._parents) > 1 else None
        if not isinstance(
            parent,
            (
                ast.BinOp,
                ast.Compare,
                ast.UnaryOp,
                ast.keyword,
                ast.BoolOp,
                ast.Subscript,
                ast.Assign,
                ast.AnnAssign,
                ast.AugAssign,
            ),
        ):
            return self._offer(node, "constant", node, lambda: ast.Constant(value=new))
        before = _text(parent)
        node.value = new
        after = _text(parent)
        node.value = value
        return self._offer(
            node, "constant", ast.Name(id=before), lambda: ast.Constant(value=new), shown=ast.Name(id=after)
        )

    # ---- statements -------------------------------------------------------------------------
    def generic_visit(self, node: ast.AST) -> ast.AST:
        result = super().generic_visit(node)
        if (
            self._functions
            and isinstance(node, _REMOVABLE)
            and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
        ):
            if isinstance(node, ast.AnnAssign) and node.value is None:
                return result
            return self._offer(node, "statement", node, ast.Pass)
        return result

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        node.target = self.visit(node.target)  # type: ignore[assignment]
        node.value = self.visit(node.value)  # type: ignore[assignment]
        result: ast.AST = node
        swap = _BINOP_SWAPS.get(type(node.op))
        if swap is not None and not _is_string(node.value):
            result = self._offer(
                node, "binop", node, lambda: ast.AugAssign(target=node.target, op=swap(), value=node.value)
            )
        if self._functions:
            removed = self._offer(node, "statement", node, ast.Pass)
            if removed is not node:
                result = removed
        return result

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        if node.value is not None:
            node.value = self.visit(node.value)  # type: ignore[assignment]
        if self._functions and node.value is not None:
            return self._offer(node, "statement", node, ast.Pass)
        return node

    def visit_Return(self, node: ast.Return) -> ast.AST:
        if node.value is None:
            return node
        node.value = self.visit(node.value)  # type: ignore[assignment]
        if isinstance(node.value, ast.Constant) and node.value.value is None:
            return node
        return self._offer(node, "return", node, lambda: ast.Return(value=ast.Constant(value=None)))


def list_mutations(tree: ast.Module) -> list[Mutation]:
    """Every mutation of `tree`, in offer order (the tree is not changed)."""
    mutator = _Mutator(target=None)
    mutator.visit(tree)
    return mutator.found


def apply_mutation(tree: ast.Module, index: int) -> ast.Module:
    """`tree` with mutation number `index` applied, in place.

    Raises IndexError when the module has fewer mutations.
    """
    mutator = _Mutator(target=index)
    result = mutator.visit(tree)
    if index >= len(mutator.found) or index < 0:
        raise IndexError(f"mutation {index} does not exist (the module has {len(mutator.found)})")
    assert isinstance(result, ast.Module)
    return result


__all__ = ["Mutation", "apply_mutation", "list_mutations"]
