"""Property test: for generated modules, the scanner's sites equal an oracle written independently here.

The generated functions are straight-line code over a few names with `if`/`else` arms, so
the oracle can track by hand what each name holds; the scanner's branch and scope
machinery is not reused.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tools.ratchet.scanner import scan_text
from tools.ratchet.settings import ScanSettings

FIELDS = ("page_size", "tp_size", "hicache_ratio")
SETTINGS = ScanSettings(fields=frozenset(FIELDS))
NAMES = ("a", "b", "c")

# expression -> what it evaluates to: "direct"/"attribute" (the record, reached so), or None
SOURCES = {
    "get_server_args()": "direct",
    "runtime.get_server_args()": "direct",
    "ServerArgs(page_size=1)": "direct",
    "ServerArgs.from_cli_args(ns)": "direct",
    "dataclasses.replace(get_server_args(), tp_size=2)": "direct",
    "self.server_args": "attribute",
    "self.model_runner.server_args": "attribute",
    'kwargs["server_args"]': "attribute",
    "load()": None,
    "other": None,
    "None": None,
    'kwargs["other"]': None,
}
PARAMS = {"server_args": "parameter", "cfg: ServerArgs": "parameter", "other": None, "args: dict": None}

assign = st.tuples(st.just("assign"), st.sampled_from(NAMES), st.sampled_from([*SOURCES, *NAMES]))
unpack = st.tuples(st.just("unpack"), st.sampled_from(NAMES), st.sampled_from(NAMES), st.sampled_from(list(SOURCES)))
read = st.tuples(
    st.just("read"),
    st.sampled_from([*NAMES, "server_args", "cfg", "other", "args", *SOURCES]),
    st.sampled_from([*FIELDS, "not_a_field"]),
    st.sampled_from(["attr", "getattr", "write"]),
)
flat = st.one_of(assign, unpack, read)
branch = st.tuples(st.just("branch"), st.lists(flat, min_size=1, max_size=4), st.lists(flat, max_size=4))
function = st.tuples(
    st.lists(st.sampled_from(list(PARAMS)), unique=True, max_size=3),
    st.lists(st.one_of(flat, flat, branch), max_size=12),
)


def _param_name(param: str) -> str:
    return param.split(":")[0]


class _Oracle:
    """Tracks by hand what each name holds in straight-line code and in `if`/`else` arms."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.expected: list[tuple[int, str, str]] = []

    def statements(self, body: list[tuple], env: dict[str, str | None], names: list[str], indent: str) -> None:  # type: ignore[type-arg]
        for stmt in body:
            if stmt[0] == "branch":
                self.lines.append(f"{indent}if cond:")
                then = dict(env)
                self.statements(stmt[1], then, names, indent + "    ")
                orelse = dict(env)
                if stmt[2]:
                    self.lines.append(f"{indent}else:")
                    self.statements(stmt[2], orelse, names, indent + "    ")
                # after the join a name holds the record if it may on either path; the kind
                # is that of the first path (in source order) that holds it
                for name in {*then, *orelse}:
                    env[name] = then.get(name) or orelse.get(name)
            else:
                self.statement(stmt, env, names, indent)

    def statement(self, stmt: tuple, env: dict[str, str | None], names: list[str], indent: str) -> None:  # type: ignore[type-arg]
        lines = self.lines
        if stmt[0] == "assign":
            _, target, value = stmt
            if value in SOURCES:
                env[target] = "alias" if SOURCES[value] else None
            else:
                env[target] = "alias" if env.get(value) else None
            lines.append(f"{indent}{target} = {value}")
        elif stmt[0] == "unpack":
            _, first, second, value = stmt
            lines.append(f"{indent}{first}, {second} = 1, {value}")
            env[first] = None
            env[second] = "alias" if SOURCES[value] else None
        else:
            _, base, field, how = stmt
            if base in SOURCES:
                holds = SOURCES[base]
            elif base in NAMES or base in names:
                holds = env.get(base)
            else:
                holds = None  # a parameter this function does not have: a global, never the record
            expr = f"getattr({base}, {field!r})" if how == "getattr" else f"{base}.{field}"
            lines.append(f"{indent}{expr} = 0" if how == "write" else f"{indent}x = {expr}")
            if holds and field in FIELDS:
                kind = "write" if how == "write" else "getattr" if how == "getattr" else holds
                self.expected.append((len(lines), kind, field))


def render_and_expect(functions: list[tuple[list[str], list[tuple]]]) -> tuple[str, list[tuple[int, str, str]]]:  # type: ignore[type-arg]
    """The module's text and the (line, kind, field) sites an independent reading of it gives."""
    oracle = _Oracle()
    for i, (params, body) in enumerate(functions):
        names = [_param_name(p) for p in params]
        oracle.lines.append(f"def f{i}(self, cond, {', '.join([*params, '**kwargs'])}):")
        oracle.lines.append("    pass")
        env: dict[str, str | None] = {_param_name(p): PARAMS[p] for p in params}
        oracle.statements(body, env, names, "    ")
    return "\n".join(oracle.lines) + "\n", oracle.expected


@settings(derandomize=True, deadline=None, max_examples=300)
@given(st.lists(function, min_size=1, max_size=4))
def test_sites_equal_the_oracle(functions):
    """Every generated module yields exactly the sites the oracle predicts, kinds included."""
    code, expected = render_and_expect(functions)
    result = scan_text("gen.py", code, SETTINGS)
    assert result.error is None, code
    assert [(s.line, s.kind, s.field) for s in result.sites] == expected, code
