"""What a raw read is: the one definition that `check` counts and `fix` rewrites.

Two questions, asked of stdlib `ast` nodes:

- `Reads.source(expr)`: does `expr` evaluate to the record, and reached how? `direct`
  (a getter call such as `get_server_args()`, a constructor `ServerArgs(...)`, a
  classmethod `ServerArgs.from_cli_args(...)`, a copy `dataclasses.replace(sa, ...)`,
  a call of a function annotated `-> ServerArgs`, awaited or not), `attribute` (`x.server_args`, also at
  the end of a chain such as `self.model_runner.server_args`, and `kwargs["server_args"]`
  / `kwargs.get("server_args")`), or the kind of the binding a name holds (`alias`,
  `parameter`, from `tools.ratchet.bindings`).
  The record's class is any of `ScanSettings.record_types` (the configured one, the
  schema's, and subclasses and aliases found in the scanned tree); `SCHEMA.build(...)`
  and `SCHEMA.load(...).record` build one too, for each name the schema is called by.
- `Reads.origin(expr)`: where that record comes from: `published` (the getter hands out
  the process's record), `instance` (an attribute: a record some object holds), `passed`
  (a parameter or keyword argument) or `built` (made here). `fix` rewrites by it.
- `Reads.access(node)`: is this `Attribute` or `getattr`/`setattr`/`delattr` call an
  access to a declared field of such an expression, or a `getattr` whose name is computed
  at run time? The rule that names its kind comes from `tools.ratchet.rules`.

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
#: the field name `Site.field` carries for a `getattr` whose name is computed at run time
COMPUTED = "*"
#: the attribute of what `SCHEMA.load(...)` returns that holds the record
LOADED_RECORD = "record"
_WORD = re.compile(r"\w+")


@attrs.frozen(slots=True)
class FieldAccess:
    """An access to a declared field: what it is read from and how, before the base is classified."""

    base: ast.expr
    field: str
    via: str  # "attribute", "getattr" or "computed" (a getattr whose name is not a literal)
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

    __slots__ = ("s", "lookup", "record_functions", "_keys", "_types")

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
        self._types = settings.record_types | {settings.record_type}

    def mentions_record(self, annotation: ast.AST) -> bool:
        return not self._types.isdisjoint(annotation_names(annotation))

    def source(self, expr: ast.expr) -> str | None:
        """The base kind of `expr` when it evaluates to the record (`loaded` for a schema's load result), else None."""
        if isinstance(expr, ast.Name):
            binding = self.lookup(expr.id)
            if binding is None:
                return None
            return "loaded" if binding.holds == "loaded" else binding.kind
        if isinstance(expr, ast.Attribute):
            if expr.attr in self.s.attributes:
                return "attribute"
            if expr.attr == LOADED_RECORD and self.source(expr.value) == "loaded":
                return "direct"
            return None
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
        if name in s.getters or name in self._types or name in self.record_functions:
            return "direct"
        if isinstance(func, ast.Attribute):
            owner = _call_name(func.value)
            if owner in self._types:
                return "direct"  # ServerArgs.from_cli_args(...) and other constructors
            if owner in s.schemas:
                if name in ("build", "as_record"):
                    return "direct"
                if name == "load":
                    return "loaded"
            if name == "get" and call.args and isinstance(first := call.args[0], ast.Constant):
                return "attribute" if first.value in self._keys else None
        if name == "getattr" and len(call.args) >= 2 and isinstance(key := call.args[1], ast.Constant):
            if key.value in s.attributes and self.source(call.args[0]) is None:
                return "attribute"  # getattr(self, "server_args")
        if name in COPY_CALLS and call.args and not isinstance(call.args[0], ast.Starred):
            return "direct" if self.source(call.args[0]) is not None else None
        return None

    def built(self, expr: ast.expr) -> bool:
        """Whether the record `expr` evaluates to was built here rather than handed out published."""
        return self.origin(expr) == "built"

    def origin(self, expr: ast.expr) -> str:
        """Where the record `expr` evaluates to comes from: published, instance, passed or built.

        Constructors, classmethods, copies, a schema's build/load and `-> ServerArgs`
        functions build one; the getter hands out the process's published record; an
        attribute is a record some object holds (engines sharing a process may each hold
        their own); a parameter or keyword argument is whatever the caller passed.
        """
        if isinstance(expr, ast.Name):
            binding = self.lookup(expr.id)
            if binding is None:
                return "passed"
            return binding.origin
        if isinstance(expr, (ast.NamedExpr, ast.Await)):
            return self.origin(expr.value)
        if isinstance(expr, ast.Attribute):
            return "built" if expr.attr == LOADED_RECORD else "instance"
        if isinstance(expr, ast.Subscript):
            return "passed"
        if isinstance(expr, ast.Call):
            source = self._call_source(expr)
            if source == "direct":
                return "published" if _call_name(expr.func) in self.s.getters else "built"
            if source == "attribute":
                func = expr.func
                return "passed" if isinstance(func, ast.Attribute) and func.attr == "get" else "instance"
        return "built"

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
            if isinstance(base, ast.Starred) or isinstance(name, ast.Starred):
                return None
            if not isinstance(name, ast.Constant):
                return FieldAccess(base, COMPUTED, "computed", _ACCESS_CALLS[func.id])
            if not isinstance(name.value, str) or name.value not in fields:
                return None
            return FieldAccess(base, name.value, "getattr", _ACCESS_CALLS[func.id])
        return None

    def kind(self, access: FieldAccess) -> str | None:
        """The rule kind of `access`, or None when its base is not the record."""
        base = self.source(access.base)
        if base is None or base == "loaded":
            return None
        return classify(Access(base, access.via, access.write))
