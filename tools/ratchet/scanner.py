"""The walk that finds raw record accesses in one module, on the stdlib `ast` (the C parser).

The walk visits statements in source order, tells `tools.ratchet.bindings` what each
binding statement binds, and asks `tools.ratchet.reads` whether each attribute or
`getattr` call is a raw read. Expressions are walked with an explicit stack, so an
expression as deep as CPython itself accepts never hits Python's recursion limit;
statements recurse, and CPython caps their nesting far below it.

Allow comments (`# ratchet: allow(reason)`) are found with `tokenize`, only in files that
contain the marker.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from tools.ratchet.bindings import Binding, Scopes
from tools.ratchet.reads import Reads
from tools.ratchet.settings import ALLOW_MARKER, ScanSettings
from tools.ratchet.sites import AllowComment, FileScan, Site
from tools.ratchet.syntax import NewSyntaxError, parse_any

ALLOW_RE = re.compile(r"#\s*ratchet:\s*allow\b(?:\(([^)]*)\))?")
_RETURNS_RECORD = "->"
_CONTEXTS = (ast.Load, ast.Store, ast.Del)


@attrs.define(slots=True, eq=False)
class Found:
    """A site plus what the codemod needs to find and judge it.

    `key` locates the node in any parser's tree: `("attr", line, col)` is where the field
    name of an attribute read ends, `("str", line, col)` where the string literal of a
    `getattr` call starts (columns in characters, 0-based).
    """

    key: tuple[str, int, int]
    kind: str
    field: str
    line: int
    col: int
    binding: Binding | None
    walrus: bool
    origin: str = "published"
    #: where the whole accessed expression ends, (line, character column): with `line` and
    #: `col` the span a rewrite replaces
    end: tuple[int, int] = (0, 0)

    @property
    def built(self) -> bool:
        return self.origin == "built"


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _target_names(node: ast.expr) -> Iterable[ast.Name]:
    if isinstance(node, ast.Name):
        yield node
    elif isinstance(node, (ast.Tuple, ast.List)):
        for el in node.elts:
            yield from _target_names(el)
    elif isinstance(node, ast.Starred):
        yield from _target_names(node.value)


def _functions(body: list[ast.stmt]) -> Iterable[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every function and method defined by statements (not inside expressions)."""
    stack = list(body)
    while stack:
        stmt = stack.pop()
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield stmt
        for name in ("body", "orelse", "finalbody", "handlers", "cases"):
            child = getattr(stmt, name, None)
            if child:
                stack.extend(child)


class _Columns:
    """Byte offsets (what `ast` gives) to character columns (what editors and libcst use)."""

    __slots__ = ("lines", "ascii")

    def __init__(self, text: str) -> None:
        self.ascii = text.isascii()
        self.lines = [] if self.ascii else text.splitlines()

    def char(self, line: int, offset: int) -> int:
        if self.ascii:
            return offset
        return len(self.lines[line - 1].encode("utf-8")[:offset].decode("utf-8", "replace"))


class ModuleScan:
    """Walks one parsed module; `found` holds every access to a declared field of the record."""

    def __init__(self, tree: ast.Module, text: str, settings: ScanSettings) -> None:
        self.scopes = Scopes()
        record_functions: list[str] = []
        if _RETURNS_RECORD in text and settings.record_type in text:
            probe = Reads(settings, self.scopes.lookup)
            record_functions = [
                f.name for f in _functions(tree.body) if f.returns is not None and probe.mentions_record(f.returns)
            ]
        self.reads = Reads(settings, self.scopes.lookup, record_functions)
        self.cols = _Columns(text)
        self.found: list[Found] = []
        self._stmt: dict[type, Callable[[Any], None]] = {
            ast.Assign: self._assign,
            ast.AnnAssign: self._ann_assign,
            ast.AugAssign: self._aug_assign,
            ast.Delete: self._delete,
            ast.For: self._for,
            ast.AsyncFor: self._for,
            ast.While: self._while,
            ast.If: self._if,
            ast.With: self._with,
            ast.AsyncWith: self._with,
            ast.Try: self._try,
            ast.Match: self._match,
            ast.FunctionDef: self._function,
            ast.AsyncFunctionDef: self._function,
            ast.ClassDef: self._class,
            ast.Import: self._import,
            ast.ImportFrom: self._import,
            ast.Global: self._skip,
            ast.Nonlocal: self._skip,
        }
        try_star = getattr(ast, "TryStar", None)
        if try_star is not None:
            self._stmt[try_star] = self._try
        self.block(tree.body)

    # -- statements -----------------------------------------------------------------------
    def block(self, body: list[ast.stmt]) -> None:
        handlers = self._stmt
        for stmt in body:
            handler = handlers.get(type(stmt))
            if handler is None:
                self.expr_children(stmt)
            else:
                handler(stmt)

    def _skip(self, stmt: ast.stmt) -> None:
        return None

    def _alias(self, name: str, value: ast.expr | None, stmt: tuple[int, int] | None) -> Binding | None:
        if value is None:
            return None
        source = self.reads.source(value)
        if source is None:
            return None
        holds = "loaded" if source == "loaded" else "record"
        return Binding("alias", name, stmt, origin=self.reads.origin(value), holds=holds)

    def bind_target(self, target: ast.expr, value: ast.expr | None, stmt: tuple[int, int] | None = None) -> None:
        """Bind the names of an assignment target; a tuple pairs with a tuple value element-wise."""
        if isinstance(target, ast.Name):
            self.scopes.bind(target.id, self._alias(target.id, value, stmt))
        elif isinstance(target, (ast.Tuple, ast.List)):
            elements = target.elts
            values = value.elts if isinstance(value, (ast.Tuple, ast.List)) else None
            pairable = (
                values is not None
                and len(values) == len(elements)
                and not any(isinstance(e, ast.Starred) for e in (*elements, *values))
            )
            for i, el in enumerate(elements):
                self.bind_target(el, values[i] if pairable and values is not None else None)
        elif isinstance(target, ast.Starred):
            self.bind_target(target.value, None)

    def target_exprs(self, target: ast.expr) -> None:
        """Walk the parts of a target that are evaluated: attribute and subscript stores."""
        if isinstance(target, ast.Name):
            return
        if isinstance(target, (ast.Tuple, ast.List)):
            for el in target.elts:
                self.target_exprs(el)
        elif isinstance(target, ast.Starred):
            self.target_exprs(target.value)
        else:
            self.expr(target)

    def _assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self.target_exprs(target)
        self.expr(node.value)
        single = len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
        stmt = (node.lineno, node.col_offset) if single else None
        for target in node.targets:
            self.bind_target(target, node.value, stmt)

    def _ann_assign(self, node: ast.AnnAssign) -> None:
        self.target_exprs(node.target)
        self.expr(node.annotation)
        if node.value is not None:
            self.expr(node.value)
        target = node.target
        if isinstance(target, ast.Name):
            if self.reads.mentions_record(node.annotation):
                origin = self.reads.origin(node.value) if node.value is not None else "passed"
                self.scopes.bind(target.id, Binding("alias", target.id, None, origin=origin))
            elif node.value is not None:
                self.scopes.bind(target.id, self._alias(target.id, node.value, None))

    def _aug_assign(self, node: ast.AugAssign) -> None:
        target = node.target
        if isinstance(target, ast.Name):
            self._use(target.id)  # `name += x` reads the name first
        else:
            self.expr(target)
        self.expr(node.value)
        if isinstance(target, ast.Name):
            self.scopes.bind(target.id, None)

    def _delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self.target_exprs(target)
        for target in node.targets:
            for name in _target_names(target):
                self.scopes.bind(name.id, None)

    def _for(self, node: ast.For | ast.AsyncFor) -> None:
        self.expr(node.iter)
        scopes = self.scopes
        scopes.open_join()  # the target is bound only if the loop runs at all
        self.target_exprs(node.target)
        self.bind_target(node.target, None)
        self.block(node.body)
        scopes.loop_exit()
        self.block(node.orelse)
        scopes.close_join()

    def _while(self, node: ast.While) -> None:
        self.expr(node.test)
        self.scopes.open_join()
        self.block(node.body)
        self.scopes.loop_exit()
        self.block(node.orelse)
        self.scopes.close_join()

    def _if(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            self.block(node.orelse)  # annotation-only imports: never executed, never counted
            return
        self.expr(node.test)  # before the arms: a `:=` in the test binds on both
        self.scopes.open_join()
        self.block(node.body)
        self.scopes.end_arm()
        self.block(node.orelse)
        self.scopes.close_join()

    def _with(self, node: ast.With | ast.AsyncWith) -> None:
        for item in node.items:
            self.expr(item.context_expr)
            if item.optional_vars is not None:
                self.target_exprs(item.optional_vars)
                self.bind_target(item.optional_vars, item.context_expr)
        self.block(node.body)

    def _try(self, node: Any) -> None:
        scopes = self.scopes
        scopes.open_join(track=True)
        self.block(node.body)
        body_end, handler_entry = scopes.try_body_done()
        for handler in node.handlers:
            scopes.restart_arm(handler_entry)
            if handler.type is not None:
                self.expr(handler.type)
            if handler.name is not None:
                scopes.bind(handler.name, None)
            self.block(handler.body)
            scopes.keep_arm()
        scopes.restart_arm(body_end)  # `else` runs after a body that did not raise
        self.block(node.orelse)
        scopes.close_join()
        self.block(node.finalbody)

    def _match(self, node: ast.Match) -> None:
        self.expr(node.subject)
        scopes = self.scopes
        scopes.open_join()
        for case in node.cases:
            scopes.restart_arm(scopes.joins[-1].entry)
            self._pattern(case.pattern)
            if case.guard is not None:
                self.expr(case.guard)
            self.block(case.body)
            scopes.keep_arm()
        # no case may match, so the entry state joins too
        scopes.close_join(with_entry=True, with_current=False)

    def _pattern(self, pattern: ast.pattern) -> None:
        for sub in ast.walk(pattern):
            if isinstance(sub, (ast.MatchAs, ast.MatchStar)) and sub.name is not None:
                self.scopes.bind(sub.name, None)  # `case ... as name` rebinds the name
            elif isinstance(sub, ast.MatchMapping) and sub.rest is not None:
                self.scopes.bind(sub.rest, None)
            elif isinstance(sub, ast.MatchValue):
                self.expr(sub.value)

    def _import(self, node: ast.Import | ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name == "*":
                continue
            bound = alias.asname or alias.name.partition(".")[0]
            self.scopes.bind(bound, None)

    def _arguments(self, args: ast.arguments) -> list[ast.arg]:
        out = [*args.posonlyargs, *args.args, *args.kwonlyargs]
        if args.vararg is not None:
            out.append(args.vararg)
        if args.kwarg is not None:
            out.append(args.kwarg)
        return out

    def _outer_parts(self, args: ast.arguments, *, annotations: bool) -> None:
        # defaults and annotations are evaluated in the enclosing scope
        for default in (*args.defaults, *args.kw_defaults):
            if default is not None:
                self.expr(default)
        if annotations:
            for arg in self._arguments(args):
                if arg.annotation is not None:
                    self.expr(arg.annotation)

    def _enter_function(self, kind: str, args: ast.arguments) -> None:
        self.scopes.push(kind)
        s = self.reads.s
        for arg in self._arguments(args):
            if arg.annotation is not None:
                record = self.reads.mentions_record(arg.annotation)
            else:
                record = arg.arg in s.parameters
            binding = Binding("parameter", arg.arg, None, origin="passed") if record else None
            self.scopes.bind(arg.arg, binding)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for decorator in node.decorator_list:
            self.expr(decorator)
        self._outer_parts(node.args, annotations=True)
        if node.returns is not None:
            self.expr(node.returns)
        self.scopes.bind(node.name, None)
        self._enter_function("function", node.args)
        self.block(node.body)
        self.scopes.pop()

    def _class(self, node: ast.ClassDef) -> None:
        for decorator in node.decorator_list:
            self.expr(decorator)
        for base in node.bases:
            self.expr(base)
        for keyword in node.keywords:
            self.expr(keyword.value)
        self.scopes.bind(node.name, None)
        self.scopes.push("class")
        self.block(node.body)
        self.scopes.pop()

    # -- expressions ----------------------------------------------------------------------
    def expr_children(self, node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.expr(child)

    def _use(self, name: str) -> None:
        binding = self.scopes.lookup(name)
        if binding is not None:
            binding.uses_other = True
            binding.use()

    def expr(self, root: ast.expr) -> None:
        """Walk one expression, iteratively and in evaluation order."""
        stack: list[Any] = [root]
        pop, push, extend = stack.pop, stack.append, stack.extend
        reads = self.reads
        while stack:
            node = pop()
            if callable(node):
                node()  # a deferred step: a `:=` binds after its value is walked
                continue
            t = type(node)
            if t is ast.Name:
                if type(node.ctx) is ast.Load:
                    self._use(node.id)
                continue
            if t is ast.Constant:
                continue
            if t is ast.Attribute:
                access = reads.access(node)
                if access is not None and (kind := reads.kind(access)) is not None:
                    self._found(node, access.base, access.field, kind)
                    if type(node.value) is ast.Name:
                        continue  # the base of a counted read is not another use of the name
                push(node.value)
                continue
            if t is ast.Call:
                access = reads.access(node)
                if access is not None and (kind := reads.kind(access)) is not None:
                    self._found(node, access.base, access.field, kind)
                    skip = access.base if type(access.base) is ast.Name else None
                    children = [c for c in ast.iter_child_nodes(node) if c is not skip]
                    children.reverse()
                    extend(children)
                    continue
            elif t is ast.NamedExpr:
                push(self._walrus_step(node))
                push(node.value)
                continue
            elif t is ast.Lambda:
                self._lambda(node)
                continue
            elif t in (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp):
                self._comprehension(node)
                continue
            elif t in _CONTEXTS:
                continue
            children = list(ast.iter_child_nodes(node))
            children.reverse()
            extend(children)

    def _walrus_step(self, node: ast.NamedExpr) -> Callable[[], None]:
        def bind() -> None:
            self.scopes.bind(node.target.id, self._alias(node.target.id, node.value, None), walrus=True)

        return bind

    def _lambda(self, node: ast.Lambda) -> None:
        self._outer_parts(node.args, annotations=False)
        self._enter_function("lambda", node.args)
        self.expr(node.body)
        self.scopes.pop()

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp) -> None:
        self.scopes.push("comprehension")
        for gen in node.generators:
            for name in _target_names(gen.target):
                self.scopes.bind(name.id, None)
        for gen in node.generators:
            self.expr(gen.iter)
            self.target_exprs(gen.target)
            for cond in gen.ifs:
                self.expr(cond)
        if isinstance(node, ast.DictComp):
            self.expr(node.key)
            self.expr(node.value)
        else:
            self.expr(node.elt)
        self.scopes.pop()

    def _found(self, node: ast.expr, base: ast.expr, field: str, kind: str) -> None:
        cols = self.cols
        binding = None
        if type(base) is ast.Name:
            binding = self.scopes.lookup(base.id)
            if binding is not None:
                binding.use()
        if type(node) is ast.Attribute:
            end_line = node.end_lineno or node.lineno
            key = ("attr", end_line, cols.char(end_line, node.end_col_offset or 0))
        else:
            literal = node.args[1]  # type: ignore[attr-defined]
            key = ("str", literal.lineno, cols.char(literal.lineno, literal.col_offset))
        col = cols.char(node.lineno, node.col_offset) + 1
        origin = self.reads.origin(base)
        end_line = node.end_lineno or node.lineno
        end = (end_line, cols.char(end_line, node.end_col_offset or 0))
        found = Found(key, kind, field, node.lineno, col, binding, type(base) is ast.NamedExpr, origin, end)
        self.found.append(found)
        if binding is not None:
            binding.reads.append(found)


def parse_allow(comment: str) -> str | None:
    """The reason of an allow comment ("" when missing), None when `comment` is not one."""
    match = ALLOW_RE.search(comment)
    if match is None:
        return None
    return (match.group(1) or "").strip()


def allow_comments(text: str) -> list[tuple[int, int, str]]:
    """`(line, col, reason)` of every allow comment; `col` is 1-based."""
    if ALLOW_MARKER not in text:
        return []
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT and ALLOW_MARKER in tok.string:
                reason = parse_allow(tok.string)
                if reason is not None:
                    out.append((tok.start[0], tok.start[1] + 1, reason))
    except (tokenize.TokenError, SyntaxError):
        pass  # the file parsed, so this only happens on exotic input; no comment is lost silently
    return out


def collect(path: str, found: list[Found], comments: list[tuple[int, int, str]]) -> FileScan:
    """Turn a walk's findings into a `FileScan`, applying same-line allow comments."""
    allows = {line: (col, reason) for line, col, reason in comments}
    used: set[int] = set()
    sites = []
    for f in sorted(found, key=lambda f: (f.line, f.col)):
        allowed = None
        if f.line in allows:
            used.add(f.line)
            allowed = allows[f.line][1] or None
        sites.append(Site(path, f.line, f.col, f.kind, f.field, allowed))
    rows = tuple(AllowComment(path, line, col, reason, line in used) for line, (col, reason) in sorted(allows.items()))
    return FileScan(path, tuple(sites), rows)


def parse(path: str, text: str, target_version: str = "") -> tuple[ast.Module, str]:
    """The tree and the text it was parsed from (see `tools.ratchet.syntax`); raises as `ast.parse` does."""
    return parse_any(path, text, target_version)


def scan_module(tree: ast.Module, text: str, settings: ScanSettings) -> list[Found]:
    """The findings of one module; `text` is the text `tree` was parsed from (lowered or not)."""
    return ModuleScan(tree, text, settings).found


def scan_text(path: str, text: str, settings: ScanSettings) -> FileScan:
    """Parse and scan one file's text; a parse failure comes back as `FileScan.error`."""
    try:
        tree, parsed = parse(path, text, settings.target_version)
    except NewSyntaxError as exc:
        return FileScan(path, error=f"cannot parse: {exc}")
    except SyntaxError as exc:
        return FileScan(path, error=f"cannot parse: {_one_line(_syntax_message(exc))}")
    except (RecursionError, MemoryError):
        # the C parser gives up exactly where CPython itself would refuse to compile the file
        return FileScan(path, error="cannot parse: nested too deeply for Python itself -- split the expression")
    except ValueError as exc:
        return FileScan(path, error=f"cannot parse: {type(exc).__name__}: {_one_line(str(exc))}")
    try:
        found = scan_module(tree, parsed, settings)
    except Exception as exc:  # a scanner bug must still name the file, not end the run
        return FileScan(path, error=f"cannot scan: internal error {type(exc).__name__}: {_one_line(str(exc))}")
    return collect(path, found, allow_comments(text))


def _syntax_message(exc: SyntaxError) -> str:
    where = f"line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "")
    return f"{exc.msg} ({where})"


def _one_line(text: str) -> str:
    return " ".join(part.strip() for part in text.strip().splitlines() if part.strip())


def scan_job(job: tuple[str, str, ScanSettings]) -> tuple[str, dict[str, Any] | None, str | None]:
    """Worker entry point: `(path, text, settings)` -> `(path, FileScan JSON, error)`."""
    path, text, settings = job
    result = scan_text(path, text, settings)
    return path, (result.to_json() if result.error is None else None), result.error
