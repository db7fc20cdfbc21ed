"""What a raw read is: the one definition that `check` counts and `fix` rewrites.

Two questions, asked of stdlib `ast` nodes:

- `Reads.source(expr)`: does `expr` evaluate to the record, and reached how? `direct`
  (a getter call such as `get_server_args()`, a constructor `ServerArgs(...)`, a
  classmethod `ServerArgs.from_cli_args(...)`, a copy `dataclasses.replace(sa, ...)`,
  a call of a function annotated `-> ServerArgs`, awaited or not), `attribute` (`x.server_args`, also at
  the end of a chain such as `self.model_runner.server_args`, and `kwargs["server_args"]`
  / `kwargs.get("server_args")`), or the kind of the binding a name holds (`alias`,
  `parameter`, from `tools.ratchet.bindings`).
- `Reads.access(node)`: is this `Attribute` or `getattr`/`setattr`/`delattr` call an
  access to a declared field of such an expression? The rule that names its kind comes
  from `tools.ratchet.rules`.

The scanner walks the tree and keeps the bindings; the codemod rewrites exactly the
sites the scanner reports from these answers, so the two can never disagree.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable

import attrs

from tools.ratchet.bindings import Binding
from tools.ratchet.rules import Access, classify
from tools.ratchet.settings import ScanSettings

#: calls whose result is a copy of their first argument (`dataclasses.replace`, `attrs.evolve`, `copy.copy`)
COPY_CALLS = frozenset({"replace", "evolve", "copy", "deepcopy"})
_ACCESS_CALLS = {"getattr": False, "setattr": True, "delattr": True}
_WORD = re.compile(r"\w+")


@attrs.frozen(slots=True)
class FieldAccess:
    """An access to a declared field: what it is read from and how, before the base is classified."""

    base: ast.expr
    field: str
    via: str  # "attribute" or "getattr"
    write: bool


def annotation_names(node: ast.AST) -> set[str]:
    """Every identifier and string-literal word in an annotation (`Optional["ServerArgs"]`, `a.ServerArgs`)."""
    out: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            out.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            out.add(sub.attr)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            out.update(_WORD.findall(sub.value))
    return out


def _call_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


class Reads:
    """The read rules for one module: the settings plus the module's `-> ServerArgs` functions."""

    __slots__ = ("s", "lookup", "record_functions", "_keys")

    def __init__(
        self,
        settings: ScanSettings,
        lookup: Callable[[str], Binding | None],
        record_functions: Iterable[str] = (),
    ) -> None:
        self.s = settings
        self.lookup = lookup
        self.record_functions = frozenset(record_functions)
        self._keys = settings.attributes | settings.parameters

    def mentions_record(self, annotation: ast.AST) -> bool:
        return self.s.record_type in annotation_names(annotation)

    def source(self, expr: ast.expr) -> str | None:
        """The base kind of `expr` when it evaluates to the record, else None."""
        if isinstance(expr, ast.Name):
            binding = self.lookup(expr.id)
            return binding.kind if binding is not None else None
        if isinstance(expr, ast.Attribute):
            return "attribute" if expr.attr in self.s.attributes else None
        if isinstance(expr, ast.Call):
            return self._call_source(expr)
        if isinstance(expr, (ast.NamedExpr, ast.Await)):
            return self.source(expr.value)
        if isinstance(expr, ast.Subscript):
            key = expr.slice
            if isinstance(key, ast.Constant) and key.value in self._keys:
                return "attribute"
        return None

    def _call_source(self, call: ast.Call) -> str | None:
        func = call.func
        name = _call_name(func)
        if name is None:
            return None
        s = self.s
        if name in s.getters or name == s.record_type or name in self.record_functions:
            return "direct"
        if isinstance(func, ast.Attribute):
            owner = _call_name(func.value)
            if owner == s.record_type:
                return "direct"  # ServerArgs.from_cli_args(...) and other constructors
            if name == "get" and call.args and isinstance(first := call.args[0], ast.Constant):
                return "attribute" if first.value in self._keys else None
        if name in COPY_CALLS and call.args and not isinstance(call.args[0], ast.Starred):
            return "direct" if self.source(call.args[0]) is not None else None
        return None

    def built(self, expr: ast.expr) -> bool:
        """Whether the record `expr` evaluates to was built here rather than handed out published.

        Constructors, classmethods, copies and `-> ServerArgs` functions build one; a getter,
        a parameter or an attribute hands out the record the process runs with.
        """
        if isinstance(expr, ast.Name):
            binding = self.lookup(expr.id)
            return binding is not None and binding.built
        if isinstance(expr, (ast.NamedExpr, ast.Await)):
            return self.built(expr.value)
        if isinstance(expr, ast.Call) and self._call_source(expr) == "direct":
            name = _call_name(expr.func)
            return name not in self.s.getters
        return False

    def access(self, node: ast.expr) -> FieldAccess | None:
        """The field access `node` is (an Attribute or a getattr-family Call), without classifying the base."""
        fields = self.s.fields
        if isinstance(node, ast.Attribute):
            if node.attr not in fields:
                return None
            return FieldAccess(node.value, node.attr, "attribute", not isinstance(node.ctx, ast.Load))
        if isinstance(node, ast.Call):
            func = node.func
            if not isinstance(func, ast.Name) or func.id not in _ACCESS_CALLS or len(node.args) < 2:
                return None
            base, name = node.args[0], node.args[1]
            if isinstance(base, ast.Starred) or not isinstance(name, ast.Constant):
                return None
            if not isinstance(name.value, str) or name.value not in fields:
                return None
            return FieldAccess(base, name.value, "getattr", _ACCESS_CALLS[func.id])
        return None

    def kind(self, access: FieldAccess) -> str | None:
        """The rule kind of `access`, or None when its base is not the record."""
        base = self.source(access.base)
        if base is None:
            return None
        return classify(Access(base, access.via, access.write))
