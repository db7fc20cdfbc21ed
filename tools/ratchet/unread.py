"""`sgconf-ratchet unread`: declared fields that no code reads through an accessor.

A setting nobody reads is dead: users set it and nothing happens. A `hot` one is worse,
since an operator can override it at run time and see it accepted. A field counts as
read when some scanned file (the `include`/`exclude` globs of `ratchet.toml`; tests are
excluded there) reads it in one of these forms, with `get_memory().x` standing for the
field's accessor as `accessor_source` gives it:

- through its accessor: `get_memory().x`, `runtime.get_memory().x`, and for a nested
  namespace the whole chain, `get_exec().kernel.x`;
- through a name assigned the accessor's result (or a sub-bag of it) anywhere in the
  same file: `mem = get_memory()` then `mem.x`, `k = get_exec().kernel` then `k.x`;
- through a snapshot or any object exposing the bags under their namespace names:
  `snap.memory.x`, `snapshot().exec.kernel.x`, and through a name assigned such a bag
  anywhere in the same file (`sched = snap.schedule`, also by tuple unpacking);
- through a function parameter named like the field's top-level namespace, the way a
  bag is handed on (`def bind(serving): serving.port`);
- by name as a string literal: `ctx.value("x")`, `getattr(get_memory(), "x")`.

Raw record reads (`server_args.x`) do not count: they are what `check` forbids.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable, Mapping, Sequence

import attrs

#: the call that reads one flat field by name (`get_context().value("page_size")`)
VALUE_CALL = "value"


@attrs.frozen(slots=True)
class ReadPath:
    """How a field is reached: the accessor function, the sub-bags after it, the snapshot path."""

    function: str
    chain: tuple[str, ...]
    snapshot: tuple[str, ...]


def read_path(field: str, accessor: str | None) -> ReadPath | None:
    """Parse an accessor expression such as `get_exec().kernel.attention_backend`."""
    if not accessor:
        return None
    try:
        expr = ast.parse(accessor, mode="eval").body
    except SyntaxError:
        return None
    attrs_: list[str] = []
    while isinstance(expr, ast.Attribute):
        attrs_.append(expr.attr)
        expr = expr.value
    attrs_.reverse()
    if not isinstance(expr, ast.Call) or not isinstance(expr.func, ast.Name) or not attrs_ or attrs_[-1] != field:
        return None
    function = expr.func.id
    chain = tuple(attrs_[:-1])
    top = function.removeprefix("get_")
    return ReadPath(function, chain, (top, *chain))


def _rooted(expr: ast.expr, functions: frozenset[str]) -> tuple[str, ...] | None:
    """`(function, *attrs)` when `expr` is an accessor call followed by attribute steps."""
    steps: list[str] = []
    while isinstance(expr, ast.Attribute):
        steps.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Call):
        return None
    func = expr.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    if name not in functions:
        return None
    steps.reverse()
    return (name, *steps)


def _chain(expr: ast.expr) -> tuple[str, ...]:
    """The attribute names at the end of `expr`: `snap.exec.kernel` -> ("exec", "kernel")."""
    steps: list[str] = []
    while isinstance(expr, ast.Attribute):
        steps.append(expr.attr)
        expr = expr.value
    steps.reverse()
    return tuple(steps)


class FileReaders:
    """The declared fields one module reads, with the line of each first read."""

    def __init__(self, tree: ast.Module, paths: Mapping[str, ReadPath]) -> None:
        self.paths = paths
        self.functions = frozenset(p.function for p in paths.values())
        tops = {p.snapshot[0] for p in paths.values()}
        self.read: dict[str, int] = {}
        aliases: dict[str, set[tuple[str, ...]]] = {}
        pending: list[tuple[str, ast.expr, int]] = []  # (field, base, line) resolved once aliases are known
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                if node.attr in paths:
                    pending.append((node.attr, node.value, node.lineno))
            elif isinstance(node, ast.Call):
                self._call(node, pending)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)):
                self._alias(node, aliases)
            elif isinstance(node, ast.arg) and node.arg in tops:
                aliases.setdefault(node.arg, set()).add(("", node.arg))  # a bag handed on as a parameter
        for field, base, line in pending:
            if self._reaches(field, base, aliases):
                self.read.setdefault(field, line)

    def _alias(
        self, node: ast.Assign | ast.AnnAssign | ast.NamedExpr, aliases: dict[str, set[tuple[str, ...]]]
    ) -> None:
        if node.value is None:
            return
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            self._bind(target, node.value, aliases)

    def _bind(self, target: ast.expr, value: ast.expr, aliases: dict[str, set[tuple[str, ...]]]) -> None:
        if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)):
            if len(target.elts) == len(value.elts):
                for t, v in zip(target.elts, value.elts, strict=True):
                    self._bind(t, v, aliases)
            return
        if not isinstance(target, ast.Name):
            return
        rooted = _rooted(value, self.functions)
        if rooted is not None:
            aliases.setdefault(target.id, set()).add(rooted)
        elif isinstance(value, ast.Attribute):
            # a bag taken off a snapshot (`sched = snap.schedule`); "" marks "not an accessor call"
            aliases.setdefault(target.id, set()).add(("", *_chain(value)))

    def _call(self, node: ast.Call, pending: list[tuple[str, ast.expr, int]]) -> None:
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        if not node.args:
            return
        if name == VALUE_CALL:
            literal = node.args[0]
            if isinstance(literal, ast.Constant) and isinstance(literal.value, str) and literal.value in self.paths:
                self.read.setdefault(literal.value, node.lineno)
        elif name == "getattr" and len(node.args) >= 2:
            literal = node.args[1]
            if isinstance(literal, ast.Constant) and isinstance(literal.value, str) and literal.value in self.paths:
                pending.append((literal.value, node.args[0], node.lineno))

    def _reaches(self, field: str, base: ast.expr, aliases: Mapping[str, set[tuple[str, ...]]]) -> bool:
        path = self.paths[field]
        want = (path.function, *path.chain)
        rooted = _rooted(base, self.functions)
        if rooted is not None:
            return rooted == want
        # a name bound to the accessor's result, possibly followed by sub-bag steps
        steps = _chain(base)
        root: ast.expr = base
        while isinstance(root, ast.Attribute):
            root = root.value
        n = len(path.snapshot)
        if isinstance(root, ast.Name) and root.id in aliases:
            for alias in aliases[root.id]:
                full = (*alias, *steps)
                if full == want or (len(full) > n and full[-n:] == path.snapshot):
                    return True
        return len(steps) >= n and steps[-n:] == path.snapshot


@attrs.frozen(slots=True)
class UnreadReport:
    """Declared fields with no reader, split by whether they are hot and whether they are allowed."""

    declared: tuple[str, ...]
    readers: Mapping[str, tuple[str, int]]  # field -> (path, line) of one reader
    unread_hot: tuple[str, ...]
    unread_cold: tuple[str, ...]
    allowed: tuple[str, ...]  # unread hot fields listed in [[unread.allow]]
    stale_allows: tuple[str, ...]  # allow entries for fields that have a reader, or are not declared
    hot: frozenset[str]
    reasons: Mapping[str, str]  # field -> why [[unread.allow]] lets it go unread

    @property
    def exit_code(self) -> int:
        """1 when a hot field has no reader or an allow entry is stale, else 0 (warnings only)."""
        return 1 if self.unread_hot or self.stale_allows else 0


def find_readers(
    sources: Iterable[tuple[str, ast.Module]], paths: Mapping[str, ReadPath]
) -> dict[str, tuple[str, int]]:
    """`field -> (path, line)` of the first reader found, over every parsed file."""
    out: dict[str, tuple[str, int]] = {}
    for path, tree in sources:
        for field, line in FileReaders(tree, paths).read.items():
            out.setdefault(field, (path, line))
    return out


def build_report(
    declared: Sequence[str],
    hot: set[str],
    readers: Mapping[str, tuple[str, int]],
    allow: Mapping[str, str],
) -> UnreadReport:
    """`allow` maps each [[unread.allow]] field to its reason."""
    allow_set = set(allow)
    unread = [f for f in declared if f not in readers]
    unread_hot = tuple(f for f in unread if f in hot and f not in allow_set)
    allowed = tuple(f for f in unread if f in allow_set)
    cold = tuple(f for f in unread if f not in hot and f not in allow_set)
    unread_set = set(unread)
    stale = tuple(sorted(f for f in allow_set if f not in unread_set))
    return UnreadReport(tuple(declared), dict(readers), unread_hot, cold, allowed, stale, frozenset(hot), dict(allow))


def _stale_why(report: UnreadReport, field: str) -> str:
    if field not in report.declared:
        return "is not a declared field"
    path, line = report.readers[field]
    return f"is read in {path}:{line}"


def render_text(report: UnreadReport, *, accessors: Mapping[str, str | None], config_name: str) -> str:
    """Failures first (hot fields without a reader, stale allow entries), then allowed, then warnings, then totals."""
    lines = []
    for field in report.unread_hot:
        lines.append(
            f"{config_name}: hot field '{field}' has no reader -- read it through "
            f"{accessors.get(field) or 'its accessor'}, or list it under [[unread.allow]] with a reason"
        )
    for field in report.stale_allows:
        lines.append(f"{config_name}: [[unread.allow]] field '{field}' {_stale_why(report, field)} -- remove the entry")
    for field in report.allowed:
        label = "hot field" if field in report.hot else "field"
        lines.append(f"allowed: {label} '{field}' has no reader ({report.reasons[field]})")
    for field in report.unread_cold:
        lines.append(
            f"warning: field '{field}' has no reader -- read it through {accessors.get(field) or 'its accessor'} or remove it"
        )
    failed = len(report.unread_hot) + len(report.stale_allows)
    unread = len(report.unread_hot) + len(report.unread_cold) + len(report.allowed)
    status = f"{failed} problem(s)" if failed else "ok"
    lines.append(
        f"sgconf-ratchet: {len(report.declared)} declared field(s), {len(report.readers)} read, {unread} unread "
        f"({len(report.unread_hot)} hot, {len(report.allowed)} allowed, {len(report.unread_cold)} warned): {status}"
    )
    return "\n".join(lines)


def render_json(report: UnreadReport, *, accessors: Mapping[str, str | None], config_name: str) -> str:
    """The same facts as the text, as one JSON object (`readers` maps each read field to one place)."""
    data = {
        "exit_code": report.exit_code,
        "declared": len(report.declared),
        "readers": {f: {"path": p, "line": line} for f, (p, line) in sorted(report.readers.items())},
        "unread_hot": [{"field": f, "accessor": accessors.get(f)} for f in report.unread_hot],
        "stale_allows": [{"field": f, "why": _stale_why(report, f)} for f in report.stale_allows],
        "allowed": [{"field": f, "hot": f in report.hot, "reason": report.reasons[f]} for f in report.allowed],
        "warnings": [{"field": f, "accessor": accessors.get(f)} for f in report.unread_cold],
        "config": config_name,
    }
    return json.dumps(data, indent=2, sort_keys=True)
