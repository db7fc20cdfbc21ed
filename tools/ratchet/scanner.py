"""The libcst visitor that finds raw record accesses, with per-scope binding tracking.

Bindings are tracked in source order per scope (module, class body, function, lambda,
comprehension), following Python's lookup rules: a function sees enclosing functions
and the module, never a class body. A name rebound to anything that is not the record
(assignment, `for`/`with`/`except`/`case` target, import, `del`, a parameter of an
inner function) stops counting from that point on.

Branches are merged where they join: each arm of an `if`/`elif`/`else`, `try`/`except`/
`else`, `match` or loop starts from the bindings before the statement, and afterwards a
name counts if it may hold the record on any path (a ratchet must not miss a read
because the non-record arm happens to come last). Loop bodies are walked once and
nested functions see the bindings of their enclosing scope where they are defined:
the analysis stays a single pass, fast and predictable.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from tools.ratchet.rules import Access, classify
from tools.ratchet.settings import ALLOW_MARKER, ScanSettings
from tools.ratchet.sites import AllowComment, FileScan, Site

ALLOW_RE = re.compile(r"#\s*ratchet:\s*allow\b(?:\(([^)]*)\))?")


class _Binding:
    """One binding of a name to the record; the codemod needs to know how it is used."""

    __slots__ = ("kind", "name", "stmt", "uses_other", "reads", "sources", "flows_out")

    def __init__(
        self,
        kind: str,
        name: str,
        stmt: cst.SimpleStatementLine | None,
        sources: tuple[_Binding, ...] = (),
    ) -> None:
        self.kind = kind  # "alias" or "parameter"
        self.name = name
        self.stmt = stmt  # the removable `name = <record>` statement line, if it is one
        self.uses_other = False  # the name is used for something other than field reads
        self.reads: list[Found] = []
        # set on the binding that stands for the name where branches join and it may hold
        # the record on some paths only; `sources` are the bindings of those paths
        self.sources = sources
        # the binding reaches a join and the name is used after it: its statement must stay
        self.flows_out = False

    def use(self) -> None:
        """The name is looked up here; a use after a join keeps every source binding alive."""
        for source in self.sources:
            if not source.flows_out:
                source.flows_out = True
                source.use()


_UNSET: Any = object()

Names = dict[str, "_Binding | None"]


class _Join:
    """A branching statement being walked: the scope it binds in and the states to merge."""

    __slots__ = ("node", "scope", "entry", "ends", "body_end", "handler_entry", "seen")

    def __init__(self, node: cst.CSTNode, scope: _Scope) -> None:
        self.node = node
        self.scope = scope
        self.entry: Names = dict(scope.names)
        self.ends: list[Names] = []  # the states at the end of each finished arm
        self.body_end: Names = {}  # try: the state after the body, where `else` starts
        self.handler_entry: Names = {}  # try: where every `except` arm starts
        self.seen: dict[str, list[_Binding | None]] | None = None  # try: every binding in the body


class _Scope:
    __slots__ = ("kind", "names")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.names: Names = {}


@attrs.define(slots=True, eq=False)
class Found:
    """A site plus the nodes the codemod rewrites; `node` is the Attribute or the getattr Call."""

    node: cst.CSTNode
    base: cst.BaseExpression
    kind: str
    field: str
    line: int
    col: int
    binding: _Binding | None


def _annotation_names(node: cst.CSTNode) -> Iterable[str]:
    """Every identifier and string literal in an annotation (`Optional["ServerArgs"]`, `a.ServerArgs`)."""
    if isinstance(node, cst.Name):
        yield node.value
    elif isinstance(node, cst.Attribute):
        yield node.attr.value
    elif isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        if isinstance(value, str):
            yield from re.findall(r"\w+", value)
    for child in node.children:
        yield from _annotation_names(child)


def _target_names(node: cst.CSTNode) -> Iterable[cst.Name]:
    if isinstance(node, cst.Name):
        yield node
    elif isinstance(node, (cst.Tuple, cst.List)):
        for el in node.elements:
            yield from _target_names(el.value)
    elif isinstance(node, cst.StarredElement):
        yield from _target_names(node.value)


def _store_attributes(node: cst.CSTNode) -> Iterable[cst.Attribute]:
    if isinstance(node, cst.Attribute):
        yield node
    elif isinstance(node, (cst.Tuple, cst.List)):
        for el in node.elements:
            yield from _store_attributes(el.value)
    elif isinstance(node, cst.StarredElement):
        yield from _store_attributes(node.value)


def _is_type_checking(test: cst.BaseExpression) -> bool:
    if isinstance(test, cst.Name):
        return test.value == "TYPE_CHECKING"
    return isinstance(test, cst.Attribute) and test.attr.value == "TYPE_CHECKING"


class ReadVisitor(cst.CSTVisitor):
    """Collects `Found` accesses and allow comments of one module (use through `MetadataWrapper.visit`)."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, settings: ScanSettings) -> None:
        super().__init__()
        self.s = settings
        self.scopes: list[_Scope] = [_Scope("module")]
        self.found: list[Found] = []
        self.comments: list[tuple[int, int, str]] = []
        self._joins: list[_Join] = []
        self._stores: set[int] = set()
        self._quiet_names: set[int] = set()  # names that are targets, attrs or field-read bases
        self._lines: list[cst.SimpleStatementLine] = []

    # -- scopes ---------------------------------------------------------------------------
    def _lookup(self, name: str) -> _Binding | None:
        innermost = self.scopes[-1]
        for scope in reversed(self.scopes):
            if scope.kind == "class" and scope is not innermost:
                continue
            if name in scope.names:
                return scope.names[name]
        return None

    def _bind(self, name: str, binding: _Binding | None, *, walrus: bool = False) -> None:
        scope = self.scopes[-1]
        if walrus:
            for candidate in reversed(self.scopes):
                if candidate.kind != "comprehension":
                    scope = candidate
                    break
        scope.names[name] = binding
        for join in self._joins:
            if join.seen is not None and join.scope is scope:
                join.seen.setdefault(name, []).append(binding)

    def _record_binding(self, name: str, value: cst.BaseExpression | None, stmt: cst.SimpleStatementLine | None) -> _Binding | None:
        if value is None or not self._holds_record(value):
            return None
        return _Binding("alias", name, stmt)

    def _holds_record(self, expr: cst.BaseExpression) -> bool:
        if self._base_kind(expr) is not None:
            return True
        if isinstance(expr, cst.Call):
            func = expr.func
            name = func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else None
            return name == self.s.record_type
        return False

    def _base_kind(self, expr: cst.BaseExpression) -> str | None:
        """What `expr` is, when it evaluates to the record: direct/alias/parameter/attribute."""
        if isinstance(expr, cst.NamedExpr):
            return self._base_kind(expr.value)
        if isinstance(expr, cst.Call):
            func = expr.func
            if isinstance(func, cst.Name) and func.value in self.s.getters:
                return "direct"
            if isinstance(func, cst.Attribute) and func.attr.value in self.s.getters:
                return "direct"
            return None
        if isinstance(expr, cst.Name):
            binding = self._lookup(expr.value)
            return binding.kind if binding is not None else None
        if isinstance(expr, cst.Attribute) and expr.attr.value in self.s.attributes:
            return "attribute"
        return None

    def _param_binding(self, param: cst.Param) -> _Binding | None:
        name = param.name.value
        if param.annotation is not None:
            if self.s.record_type in set(_annotation_names(param.annotation.annotation)):
                return _Binding("parameter", name, None)
            return None
        if name in self.s.parameters:
            return _Binding("parameter", name, None)
        return None

    def _all_params(self, params: cst.Parameters) -> list[cst.Param]:
        out = [*params.posonly_params, *params.params, *params.kwonly_params]
        if isinstance(params.star_arg, cst.Param):
            out.append(params.star_arg)
        if params.star_kwarg is not None:
            out.append(params.star_kwarg)
        return out

    def _visit_params_outer(self, params: cst.Parameters) -> None:
        # defaults and annotations are evaluated in the enclosing scope
        for param in self._all_params(params):
            if param.default is not None:
                param.default.visit(self)
            if param.annotation is not None:
                param.annotation.visit(self)

    def _enter_function(self, kind: str, params: cst.Parameters) -> None:
        self.scopes.append(_Scope(kind))
        for param in self._all_params(params):
            self._bind(param.name.value, self._param_binding(param))

    # -- accesses -------------------------------------------------------------------------
    def _record(self, node: cst.CSTNode, base: cst.BaseExpression, field: str, via: str, write: bool) -> None:
        if field not in self.s.fields:
            return
        base_kind = self._base_kind(base)
        if base_kind is None:
            return
        binding = None
        if isinstance(base, cst.Name):
            binding = self._lookup(base.value)
            self._quiet_names.add(id(base))
            if binding is not None:
                binding.use()
        kind = classify(Access(base_kind, via, write))
        pos = self.get_metadata(PositionProvider, node).start
        found = Found(node, base, kind, field, pos.line, pos.column + 1, binding)
        self.found.append(found)
        if binding is not None:
            binding.reads.append(found)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        self._quiet_names.add(id(node.attr))
        self._record(node, node.value, node.attr.value, "attribute", id(node) in self._stores)
        return True

    def visit_Call(self, node: cst.Call) -> bool:
        func = node.func
        if isinstance(func, cst.Name) and func.value in ("getattr", "setattr", "delattr") and len(node.args) >= 2:
            name_arg = node.args[1].value
            if isinstance(name_arg, cst.SimpleString) and not node.args[0].star and not node.args[1].star:
                field = name_arg.evaluated_value
                if isinstance(field, str):
                    self._record(node, node.args[0].value, field, "getattr", func.value != "getattr")
        return True

    def visit_Arg(self, node: cst.Arg) -> bool:
        if node.keyword is not None:
            self._quiet_names.add(id(node.keyword))
        return True

    def visit_Name(self, node: cst.Name) -> bool:
        if id(node) not in self._quiet_names:
            binding = self._lookup(node.value)
            if binding is not None:
                binding.uses_other = True
                binding.use()
        return False

    def visit_Comment(self, node: cst.Comment) -> bool:
        if ALLOW_MARKER in node.value:
            pos = self.get_metadata(PositionProvider, node).start
            self.comments.append((pos.line, pos.column + 1, node.value))
        return False

    # -- statements that bind -------------------------------------------------------------
    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        self._lines.append(node)
        return True

    def leave_SimpleStatementLine(self, original_node: cst.SimpleStatementLine) -> None:
        self._lines.pop()

    def _simple_line(self, stmt: cst.CSTNode) -> cst.SimpleStatementLine | None:
        line = self._lines[-1] if self._lines else None
        if line is not None and len(line.body) == 1 and line.body[0] is stmt:
            return line
        return None

    def _mark_targets(self, target: cst.CSTNode) -> None:
        for attr in _store_attributes(target):
            self._stores.add(id(attr))
        for name in _target_names(target):
            self._quiet_names.add(id(name))

    def visit_Assign(self, node: cst.Assign) -> bool:
        for target in node.targets:
            self._mark_targets(target.target)
        return True

    def leave_Assign(self, original_node: cst.Assign) -> None:
        single = len(original_node.targets) == 1 and isinstance(original_node.targets[0].target, cst.Name)
        stmt = self._simple_line(original_node) if single else None
        for target in original_node.targets:
            self._bind_target(target.target, original_node.value, stmt)

    def _bind_target(self, target: cst.CSTNode, value: cst.BaseExpression | None, stmt: cst.SimpleStatementLine | None) -> None:
        if isinstance(target, cst.Name):
            self._bind(target.value, self._record_binding(target.value, value, stmt))
        elif isinstance(target, (cst.Tuple, cst.List)):
            elements = target.elements
            pairable = (
                isinstance(value, (cst.Tuple, cst.List))
                and len(value.elements) == len(elements)
                and not any(isinstance(e, cst.StarredElement) for e in (*elements, *value.elements))
            )
            for i, el in enumerate(elements):
                sub = value.elements[i].value if pairable else None  # type: ignore[union-attr]
                self._bind_target(el.value, sub, None)
        elif isinstance(target, cst.StarredElement):
            self._bind_target(target.value, None, None)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> bool:
        self._mark_targets(node.target)
        return True

    def leave_AnnAssign(self, original_node: cst.AnnAssign) -> None:
        target = original_node.target
        if not isinstance(target, cst.Name):
            return
        if self.s.record_type in set(_annotation_names(original_node.annotation.annotation)):
            self._bind(target.value, _Binding("alias", target.value, None))
        elif original_node.value is not None:
            self._bind(target.value, self._record_binding(target.value, original_node.value, None))

    def visit_AugAssign(self, node: cst.AugAssign) -> bool:
        # `name += x` reads the name, so it stays a use; only a field target is a write
        for attr in _store_attributes(node.target):
            self._stores.add(id(attr))
        return True

    def leave_AugAssign(self, original_node: cst.AugAssign) -> None:
        if isinstance(original_node.target, cst.Name):
            self._bind(original_node.target.value, None)

    def visit_Del(self, node: cst.Del) -> bool:
        for attr in _store_attributes(node.target):
            self._stores.add(id(attr))
        return True

    def leave_Del(self, original_node: cst.Del) -> None:
        for name in _target_names(original_node.target):
            self._bind(name.value, None)

    def leave_NamedExpr(self, original_node: cst.NamedExpr) -> None:
        target = original_node.target
        if isinstance(target, cst.Name):
            self._quiet_names.add(id(target))
            self._bind(target.value, self._record_binding(target.value, original_node.value, None), walrus=True)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> bool:
        if isinstance(node.target, cst.Name):
            self._quiet_names.add(id(node.target))
        return True

    def visit_For(self, node: cst.For) -> bool:
        self._mark_targets(node.target)
        return True

    def visit_For_body(self, node: cst.For) -> None:
        # the target is bound only if the loop runs at all
        self._open_join(node)
        self._bind_target(node.target, None, None)

    def leave_For_body(self, original_node: cst.For) -> None:
        self._loop_exit()

    def leave_For(self, original_node: cst.For) -> None:
        self._close_join(original_node)

    def visit_While_body(self, node: cst.While) -> None:
        self._open_join(node)

    def leave_While_body(self, original_node: cst.While) -> None:
        self._loop_exit()

    def leave_While(self, original_node: cst.While) -> None:
        self._close_join(original_node)

    def visit_With(self, node: cst.With) -> bool:
        for item in node.items:
            if item.asname is not None:
                self._mark_targets(item.asname.name)
        return True

    def visit_With_body(self, node: cst.With) -> None:
        for item in node.items:
            if item.asname is not None:
                self._bind_target(item.asname.name, item.item, None)

    def _bind_exception(self, asname: cst.AsName | None) -> None:
        if asname is not None and isinstance(asname.name, cst.Name):
            self._quiet_names.add(id(asname.name))
            self._bind(asname.name.value, None)

    def visit_ExceptHandler_body(self, node: cst.ExceptHandler) -> None:
        self._bind_exception(node.name)

    def visit_ExceptStarHandler_body(self, node: cst.ExceptStarHandler) -> None:
        self._bind_exception(node.name)

    def _visit_capture(self, node: cst.MatchAs | cst.MatchStar) -> bool:
        if node.name is not None:
            self._quiet_names.add(id(node.name))
        return True

    def _leave_capture(self, original_node: cst.MatchAs | cst.MatchStar) -> None:
        # `case ... as name` / `case [*name]` rebinds the name to something else
        if original_node.name is not None:
            self._bind(original_node.name.value, None)

    visit_MatchAs = visit_MatchStar = _visit_capture
    leave_MatchAs = leave_MatchStar = _leave_capture

    def visit_Import(self, node: cst.Import) -> bool:
        for alias in node.names:
            bound: cst.BaseExpression = alias.asname.name if alias.asname is not None else alias.name
            while isinstance(bound, cst.Attribute):
                bound = bound.value
            if isinstance(bound, cst.Name):
                self._bind(bound.value, None)
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        if isinstance(node.names, Sequence):
            for alias in node.names:
                bound = alias.asname.name if alias.asname is not None else alias.name
                if isinstance(bound, cst.Name):
                    self._bind(bound.value, None)
        return False

    # -- branches: each arm starts from the entry state, the arms merge where they join -----
    def _open_join(self, node: cst.CSTNode) -> None:
        self._joins.append(_Join(node, self.scopes[-1]))

    def _end_arm(self, restart: Names) -> None:
        """Keep the state at the end of the arm just walked; the next arm starts at `restart`."""
        join = self._joins[-1]
        join.ends.append(join.scope.names)
        join.scope.names = dict(restart)

    def _loop_exit(self) -> None:
        # the body ran zero or more times; `else` (and what follows) sees either state
        join = self._joins[-1]
        join.ends.append(join.scope.names)
        join.scope.names = self._merge([join.entry, join.scope.names])

    def _close_join(self, node: cst.CSTNode) -> None:
        join = self._joins[-1] if self._joins else None
        if join is None or join.node is not node:
            return  # never opened: a `TYPE_CHECKING` block
        self._joins.pop()
        join.scope.names = self._merge([*join.ends, join.scope.names])

    def _merge(self, states: Sequence[Names]) -> Names:
        """The bindings where paths join: a name that may hold the record on any path still does."""
        first = states[0]
        merged = dict(first)
        changed = {name for state in states[1:] for name, b in state.items() if first.get(name, _UNSET) is not b}
        changed |= {name for name in first if any(name not in state for state in states[1:])}
        for name in changed:
            merged[name] = self._join_values(name, [state.get(name, _UNSET) for state in states])
        return merged

    @staticmethod
    def _join_values(name: str, values: Sequence[_Binding | None]) -> _Binding | None:
        """One name's binding where paths join; `values` holds `_UNSET` where a path leaves it unbound."""
        records = list({id(v): v for v in values if isinstance(v, _Binding)}.values())
        if not records:
            return None
        if len(records) == 1 and all(v is records[0] for v in values):
            return records[0]
        return _Binding(records[0].kind, name, None, sources=tuple(records))

    def visit_If(self, node: cst.If) -> bool:
        if not _is_type_checking(node.test):
            return True
        # annotations-only imports: never executed, never counted
        if node.orelse is not None:
            node.orelse.visit(self)
        return False

    def visit_If_body(self, node: cst.If) -> None:
        self._open_join(node)  # after the test: a `:=` in it binds on both arms

    def leave_If_body(self, original_node: cst.If) -> None:
        self._end_arm(self._joins[-1].entry)

    def leave_If(self, original_node: cst.If) -> None:
        # the current state is the end of `else`/`elif`, or the entry state when there is none
        self._close_join(original_node)

    def _open_try(self, node: cst.Try | cst.TryStar) -> None:
        self._open_join(node)
        self._joins[-1].seen = {}

    def visit_Try(self, node: cst.Try) -> bool:
        self._open_try(node)
        return True

    def visit_TryStar(self, node: cst.TryStar) -> bool:
        self._open_try(node)
        return True

    def _leave_try_body(self) -> None:
        join = self._joins[-1]
        join.body_end = dict(join.scope.names)
        # an exception may leave the body anywhere: a handler sees the entry state, the end
        # state, or any binding made in between
        entry = self._merge([join.entry, join.body_end])
        for name, values in (join.seen or {}).items():
            entry[name] = self._join_values(name, [entry.get(name, _UNSET), *values])
        join.handler_entry = entry
        join.seen = None

    def leave_Try_body(self, original_node: cst.Try) -> None:
        self._leave_try_body()

    def leave_TryStar_body(self, original_node: cst.TryStar) -> None:
        self._leave_try_body()

    def _enter_handler(self) -> None:
        join = self._joins[-1]
        join.scope.names = dict(join.handler_entry)

    def _keep_arm_end(self) -> None:
        join = self._joins[-1]
        join.ends.append(dict(join.scope.names))

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> bool:
        self._enter_handler()
        return True

    def leave_ExceptHandler(self, original_node: cst.ExceptHandler) -> None:
        self._keep_arm_end()

    def visit_ExceptStarHandler(self, node: cst.ExceptStarHandler) -> bool:
        self._enter_handler()
        return True

    def leave_ExceptStarHandler(self, original_node: cst.ExceptStarHandler) -> None:
        self._keep_arm_end()

    def _try_else(self) -> None:
        join = self._joins[-1]
        join.scope.names = dict(join.body_end)  # `else` runs after a body that did not raise

    def _try_finally(self) -> None:
        join = self._joins.pop()
        join.scope.names = self._merge(join.ends)

    def visit_Try_orelse(self, node: cst.Try) -> None:
        self._try_else()

    def leave_Try_orelse(self, original_node: cst.Try) -> None:
        self._keep_arm_end()

    def visit_Try_finalbody(self, node: cst.Try) -> None:
        self._try_finally()

    def visit_TryStar_orelse(self, node: cst.TryStar) -> None:
        self._try_else()

    def leave_TryStar_orelse(self, original_node: cst.TryStar) -> None:
        self._keep_arm_end()

    def visit_TryStar_finalbody(self, node: cst.TryStar) -> None:
        self._try_finally()

    def visit_Match_cases(self, node: cst.Match) -> None:
        self._open_join(node)

    def visit_MatchCase(self, node: cst.MatchCase) -> bool:
        join = self._joins[-1]
        join.scope.names = dict(join.entry)
        return True

    def leave_MatchCase(self, original_node: cst.MatchCase) -> None:
        self._keep_arm_end()

    def leave_Match(self, original_node: cst.Match) -> None:
        # no case may match, so the entry state joins too
        join = self._joins.pop()
        join.scope.names = self._merge([*join.ends, join.entry])

    # -- scopes ---------------------------------------------------------------------------
    def _visit_header(self, node: cst.FunctionDef | cst.ClassDef) -> None:
        # the comment lines above and between decorators, for stale allow comments
        for part in (*node.leading_lines, *node.decorators, *node.lines_after_decorators):
            part.visit(self)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self._visit_header(node)
        self._visit_params_outer(node.params)
        if node.returns is not None:
            node.returns.visit(self)
        self._bind(node.name.value, None)
        self._enter_function("function", node.params)
        node.body.visit(self)
        self.scopes.pop()
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        self._visit_params_outer(node.params)
        self._enter_function("lambda", node.params)
        node.body.visit(self)
        self.scopes.pop()
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self._visit_header(node)
        for arg in (*node.bases, *node.keywords):
            arg.visit(self)
        self._bind(node.name.value, None)
        self.scopes.append(_Scope("class"))
        node.body.visit(self)
        self.scopes.pop()
        return False

    def _enter_comprehension(self, for_in: cst.CompFor) -> None:
        self.scopes.append(_Scope("comprehension"))
        current: cst.CompFor | None = for_in
        while current is not None:
            for name in _target_names(current.target):
                self._quiet_names.add(id(name))
                self._bind(name.value, None)
            current = current.inner_for_in

    def _visit_comprehension(self, node: cst.ListComp | cst.SetComp | cst.GeneratorExp | cst.DictComp) -> bool:
        self._enter_comprehension(node.for_in)
        return True

    def _leave_comprehension(self, original_node: cst.ListComp | cst.SetComp | cst.GeneratorExp | cst.DictComp) -> None:
        self.scopes.pop()

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _visit_comprehension
    leave_ListComp = leave_SetComp = leave_GeneratorExp = leave_DictComp = _leave_comprehension


def analyze(module: cst.Module, settings: ScanSettings) -> tuple[MetadataWrapper, ReadVisitor]:
    """Run the visitor; the returned wrapper's `.module` holds the nodes `Found` refers to."""
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    visitor = ReadVisitor(settings)
    wrapper.visit(visitor)
    return wrapper, visitor


def parse_allow(comment: str) -> str | None:
    """The reason of an allow comment ("" when missing), None when `comment` is not one."""
    match = ALLOW_RE.search(comment)
    if match is None:
        return None
    return (match.group(1) or "").strip()


def collect(path: str, visitor: ReadVisitor) -> FileScan:
    """Turn a visitor's findings into a `FileScan`, applying same-line allow comments."""
    allows: dict[int, tuple[int, str]] = {}
    for line, col, text in visitor.comments:
        reason = parse_allow(text)
        if reason is not None:
            allows[line] = (col, reason)
    used: set[int] = set()
    sites = []
    for f in sorted(visitor.found, key=lambda f: (f.line, f.col)):
        allowed = None
        if f.line in allows:
            used.add(f.line)
            allowed = allows[f.line][1] or None
        sites.append(Site(path, f.line, f.col, f.kind, f.field, allowed))
    comments = tuple(
        AllowComment(path, line, col, reason, line in used) for line, (col, reason) in sorted(allows.items())
    )
    return FileScan(path, tuple(sites), comments)


def scan_text(path: str, text: str, settings: ScanSettings) -> FileScan:
    """Parse and scan one file's text; a parse failure comes back as `FileScan.error`."""
    try:
        module = cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        return FileScan(path, error=f"cannot parse: {_one_line(str(exc))}")
    except (RecursionError, ValueError) as exc:
        return FileScan(path, error=f"cannot parse: {type(exc).__name__}: {_one_line(str(exc))}")
    try:
        _, visitor = analyze(module, settings)
    except RecursionError:
        return FileScan(path, error="cannot scan: nested too deeply for the scanner -- split the expression")
    except Exception as exc:  # a scanner bug must still name the file, not end the run
        return FileScan(path, error=f"cannot scan: internal error {type(exc).__name__}: {_one_line(str(exc))}")
    return collect(path, visitor)


def _one_line(text: str) -> str:
    return " ".join(part.strip() for part in text.strip().splitlines() if part.strip())


def scan_job(job: tuple[str, str, ScanSettings]) -> tuple[str, dict[str, Any] | None, str | None]:
    """Worker entry point: `(path, text, settings)` -> `(path, FileScan JSON, error)`."""
    path, text, settings = job
    result = scan_text(path, text, settings)
    return path, (result.to_json() if result.error is None else None), result.error
