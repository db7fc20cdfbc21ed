"""One class per kind of raw access, each carrying its own VALID / INVALID snippet tables.

The scanner works out, for every access to a declared field, what the record was
reached through (`Access`); the first rule that `matches` names the kind. Rules are
checked in `RULES` order, so a write through an alias is a `write`, and a `getattr`
on a parameter is a `getattr`.

The tables are Fixit-style: a VALID snippet must produce no site at all, an INVALID
snippet exactly the sites it lists. `tests/tools/test_rules.py` turns every row into a
test, so a rule and its examples are read (and kept) together. That is also why this
module runs past 600 lines: most of it is the tables, and moving them away from their
rules would lose exactly that.
"""

from __future__ import annotations

from typing import ClassVar

import attrs


@attrs.frozen(slots=True)
class Access:
    """How a field was reached: `base` is direct/alias/attribute/parameter, `via` attribute or getattr."""

    base: str
    via: str
    write: bool


@attrs.frozen(slots=True)
class Invalid:
    """An INVALID example and the `(kind, field)` sites it must produce, in source order."""

    code: str
    expect: tuple[tuple[str, str], ...]


class Rule:
    """A kind of raw access; subclasses set `kind`, `summary` and the two tables."""

    kind: ClassVar[str]
    summary: ClassVar[str]
    VALID: ClassVar[tuple[str, ...]] = ()
    INVALID: ClassVar[tuple[Invalid, ...]] = ()

    def matches(self, access: Access) -> bool:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{self.kind} rule>"


class WriteRule(Rule):
    kind = "write"
    summary = "assignment to or deletion of a raw record field"
    VALID = (
        """
        def f(cfg):
            cfg.page_size = 16
        """,
        """
        sa = get_server_args()
        sa = Other()
        sa.page_size = 16
        """,
        """
        def f(server_args):
            server_args.not_a_field = 1
        """,
    )
    INVALID = (
        Invalid(
            """
            sa = get_server_args()
            sa.page_size = 16
            """,
            (("write", "page_size"),),
        ),
        Invalid(
            """
            def f(self):
                del self.server_args.tp_size
                self.server_args.dp_size += 1
            """,
            (("write", "tp_size"), ("write", "dp_size")),
        ),
        Invalid(
            """
            def f(server_args: ServerArgs):
                server_args.page_size, n = 1, 2
                setattr(server_args, "tp_size", 2)
                setattr(server_args, name, 3)
            """,
            (("write", "page_size"), ("write", "tp_size"), ("write", "*")),
        ),
    )

    def matches(self, access: Access) -> bool:
        return access.write


class GetattrRule(Rule):
    kind = "getattr"
    summary = "getattr() of a raw record field named by a string literal"
    VALID = (
        """
        def f(cfg, name):
            return getattr(cfg, "page_size", 1), getattr(cfg, name)
        """,
        """
        getattr(get_server_args(), "attn_tp_size")
        """,
    )
    INVALID = (
        Invalid(
            """
            x = getattr(get_server_args(), "page_size")
            """,
            (("getattr", "page_size"),),
        ),
        Invalid(
            """
            def f(self):
                sa = self.server_args
                return getattr(sa, "tp_size", 1), getattr(self.server_args, 'dp_size')
            """,
            (("getattr", "tp_size"), ("getattr", "dp_size")),
        ),
    )

    def matches(self, access: Access) -> bool:
        return access.via == "getattr"


class ComputedRule(Rule):
    kind = "computed"
    summary = "getattr() of the raw record with a name computed at run time (counted; never rewritten)"
    VALID = (
        """
        def f(cfg, name):
            return getattr(cfg, name)
        """,
        """
        def f(self, name):
            return getattr(self, name), getattr(get_schedule(), name)
        """,
    )
    INVALID = (
        Invalid(
            """
            def f(server_args, name):
                return getattr(server_args, name)
            """,
            (("computed", "*"),),
        ),
        Invalid(
            """
            def f(self, prefix):
                sa = self.server_args
                return getattr(sa, f"{prefix}_size"), getattr(get_server_args(), "page" + "_size", 1)
            """,
            (("computed", "*"), ("computed", "*")),
        ),
        Invalid(
            """
            def f(self, name):
                return getattr(getattr(self, "server_args"), name)
            """,
            (("computed", "*"),),
        ),
    )

    def matches(self, access: Access) -> bool:
        return access.via == "computed"


class DirectRule(Rule):
    kind = "direct"
    summary = "field read straight off the getter's result"
    VALID = (
        """
        def f():
            pass_record(get_server_args())
        """,
        """
        get_server_args().attn_tp_size
        """,
        """
        get_schedule().page_size
        """,
        """
        if TYPE_CHECKING:
            x = get_server_args().page_size
        """,
        """
        x = get_server_args().page_size  # ratchet: allow(diagnostic dump of the raw input)
        """,
        """
        other.get_server_args.page_size
        """,
        """
        text.replace("a", "b").page_size
        ServerArgsBuilder().page_size
        dataclasses.replace(plan, page_size=1).page_size
        """,
        """
        def load() -> dict:
            return {}
        load().page_size
        """,
    )
    INVALID = (
        Invalid(
            """
            x = get_server_args().page_size
            """,
            (("direct", "page_size"),),
        ),
        Invalid(
            """
            import runtime
            n = runtime.get_server_args().tp_size
            """,
            (("direct", "tp_size"),),
        ),
        Invalid(
            """
            print(f"page={get_server_args().page_size}")
            """,
            (("direct", "page_size"),),
        ),
        Invalid(
            """
            f = lambda: get_server_args().page_size
            """,
            (("direct", "page_size"),),
        ),
        Invalid(
            """
            @functools.lru_cache(maxsize=get_server_args().max_running_requests)
            def f():
                pass
            """,
            (("direct", "max_running_requests"),),
        ),
        Invalid(
            """
            sizes = [get_server_args().page_size * i for i in range(3)]
            """,
            (("direct", "page_size"),),
        ),
        Invalid(
            """
            if TYPE_CHECKING:
                pass
            else:
                x = get_server_args().page_size
            """,
            (("direct", "page_size"),),
        ),
        Invalid(
            """
            x = (sa := get_server_args()).page_size
            """,
            (("direct", "page_size"),),
        ),
        Invalid(
            """
            a = ServerArgs(model_path="m").page_size
            b = sgconf.ServerArgs.from_cli_args(ns).tp_size
            c = dataclasses.replace(get_server_args(), page_size=1).page_size
            d = attrs.evolve(self.server_args, tp_size=2).dp_size
            """,
            (("direct", "page_size"), ("direct", "tp_size"), ("direct", "page_size"), ("direct", "dp_size")),
        ),
        Invalid(
            """
            def load() -> ServerArgs:
                return read_args()
            class Runner:
                def args(self) -> "Optional[ServerArgs]":
                    return None
                def f(self):
                    return load().page_size + self.args().tp_size
                async def fetch(self) -> ServerArgs:
                    return await remote()
                async def g(self):
                    sa = await self.fetch()
                    return (await self.fetch()).dp_size, sa.page_size
            """,
            (("direct", "page_size"), ("direct", "tp_size"), ("direct", "dp_size"), ("alias", "page_size")),
        ),
    )

    def matches(self, access: Access) -> bool:
        return access.base == "direct"


class AliasRule(Rule):
    kind = "alias"
    summary = "field read through a local name bound to the record"
    VALID = (
        """
        sa = get_server_args()
        sa = load_other()
        sa.page_size
        """,
        """
        def f(self):
            sa = self.server_args
            with open("x") as sa:
                return sa.page_size
        """,
        """
        sa = get_server_args()
        def f():
            sa = {}
            return sa.page_size
        """,
        """
        sa = get_server_args()
        def f(sa):
            return sa.page_size
        """,
        """
        sa = get_server_args()
        rows = [sa.page_size for sa in others]
        """,
        """
        sa = get_server_args()
        f = lambda sa: sa.page_size
        """,
        """
        class A:
            sa = get_server_args()
            def m(self):
                return sa.page_size
        """,
        """
        sa = get_server_args()
        sa, n = make(), 1
        sa.page_size
        """,
        """
        sa = get_server_args()
        for sa in items:
            sa.page_size
        """,
        """
        def f():
            cfg = get_server_args()
            plan = make_plan(cfg)
            return plan.page_size
        """,
        """
        sa = get_server_args()
        import sa
        sa.page_size
        """,
        """
        sa = get_server_args()
        if cond:
            sa = load()
        else:
            sa = other()
        sa.page_size
        """,
        """
        sa = get_server_args()
        try:
            sa = load()
        except OSError as sa:
            sa.page_size
        """,
        """
        def f(**kwargs):
            sa = kwargs["other"]
            cfg = kwargs.get(name)
            return sa.page_size, cfg.tp_size
        """,
        """
        with open(path) as sa:
            sa.page_size
        """,
        """
        sa = get_server_args()
        match value:
            case Config() as sa:
                sa.page_size
            case [*sa]:
                sa.page_size
        """,
    )
    INVALID = (
        Invalid(
            """
            sa = get_server_args()
            x = sa.page_size
            """,
            (("alias", "page_size"),),
        ),
        Invalid(
            """
            class Worker:
                def __init__(self, runner):
                    sa = runner.model_runner.server_args
                    self.n = sa.tp_size
                    sa2 = sa
                    self.m = sa2.dp_size
            """,
            (("alias", "tp_size"), ("alias", "dp_size")),
        ),
        Invalid(
            """
            sa = get_server_args()
            def outer():
                def inner():
                    return sa.page_size
                return inner
            """,
            (("alias", "page_size"),),
        ),
        Invalid(
            """
            class A:
                sa = get_server_args()
                size = sa.page_size
            """,
            (("alias", "page_size"),),
        ),
        Invalid(
            """
            n, sa = 1, get_server_args()
            sa.tp_size
            """,
            (("alias", "tp_size"),),
        ),
        Invalid(
            """
            if (sa := get_server_args()) is not None:
                print(sa.page_size)
            """,
            (("alias", "page_size"),),
        ),
        Invalid(
            """
            rows = [(sa := get_server_args()) for _ in range(2)]
            sa.page_size
            """,
            (("alias", "page_size"),),
        ),
        Invalid(
            """
            sa: ServerArgs = build()
            sa.page_size
            """,
            (("alias", "page_size"),),
        ),
        Invalid(
            """
            sa = get_server_args()
            rows = [sa.page_size * i for i in range(3)]
            """,
            (("alias", "page_size"),),
        ),
        Invalid(
            """
            sa = ServerArgs(page_size=16)
            sa.page_size
            """,
            (("alias", "page_size"),),
        ),
        Invalid(
            """
            if cond:
                sa = get_server_args()
            else:
                sa = other()
            sa.page_size
            """,
            (("alias", "page_size"),),
        ),
        Invalid(
            """
            sa = get_server_args()
            if cond:
                sa = None
            elif other:
                print(sa.tp_size)
            else:
                print(sa.dp_size)
            """,
            (("alias", "tp_size"), ("alias", "dp_size")),
        ),
        Invalid(
            """
            try:
                sa = get_server_args()
                sa = None
            except KeyError:
                sa.tp_size
            else:
                sa = None
            finally:
                sa.page_size
            """,
            (("alias", "tp_size"), ("alias", "page_size")),
        ),
        Invalid(
            """
            sa = get_server_args()
            for sa in items:
                pass
            while cond:
                sa = None
            sa.dp_size
            """,
            (("alias", "dp_size"),),
        ),
        Invalid(
            """
            match mode:
                case "a":
                    sa = get_server_args()
                case _:
                    sa = None
            sa.page_size
            """,
            (("alias", "page_size"),),
        ),
        Invalid(
            """
            def launch(**kwargs):
                sa = kwargs["server_args"]
                cfg = kwargs.get("server_args")
                return sa.page_size, cfg.tp_size
            """,
            (("alias", "page_size"), ("alias", "tp_size")),
        ),
        Invalid(
            """
            def main(ns):
                server_args = ServerArgs.from_cli_args(ns)
                copy = dataclasses.replace(server_args, page_size=16)
                return server_args.tp_size + copy.page_size
            """,
            (("alias", "tp_size"), ("alias", "page_size")),
        ),
        Invalid(
            """
            def f(self):
                with ServerArgs.from_file(path) as sa:
                    sa.page_size
                n, (cfg, m) = 1, (self.model_runner.server_args, 2)
                cfg.dp_size
                if (args := load_args()) and (sa2 := self.server_args):
                    sa2.tp_size
            """,
            (("alias", "page_size"), ("alias", "dp_size"), ("alias", "tp_size")),
        ),
    )

    def matches(self, access: Access) -> bool:
        return access.base == "alias"


class AttributeRule(Rule):
    kind = "attribute"
    summary = "field read through an attribute named like the record (`self.server_args.f`)"
    VALID = (
        """
        def f(self):
            return self.args.page_size
        """,
        """
        def f(self):
            call(self.server_args)
        """,
        """
        def f(self):
            self.server_args.not_a_field
        """,
        """
        def f(self):
            self.server_args.attn_dp_size
        """,
    )
    INVALID = (
        Invalid(
            """
            class A:
                def f(self):
                    return self.server_args.page_size
            """,
            (("attribute", "page_size"),),
        ),
        Invalid(
            """
            def f(runner):
                return runner.model_runner.server_args.speculative_algorithm.upper()
            """,
            (("attribute", "speculative_algorithm"),),
        ),
        Invalid(
            """
            def f(ctx, **kwargs):
                return kwargs["server_args"].page_size, ctx.kwargs.get("server_args").tp_size
            """,
            (("attribute", "page_size"), ("attribute", "tp_size")),
        ),
        Invalid(
            """
            def f(self):
                sa = getattr(self.worker, "server_args")
                return getattr(self, "server_args").page_size, getattr(getattr(self, "server_args"), "tp_size"), sa.dp_size
            """,
            (("attribute", "page_size"), ("getattr", "tp_size"), ("alias", "dp_size")),
        ),
    )

    def matches(self, access: Access) -> bool:
        return access.base == "attribute"


class ParameterRule(Rule):
    kind = "parameter"
    summary = "field read through a parameter holding the record"
    VALID = (
        """
        def f(server_args: dict):
            return server_args.page_size
        """,
        """
        def f(args):
            return args.page_size
        """,
        """
        def f(server_args: ServerArgs):
            server_args = normalize(server_args)
            return server_args.page_size
        """,
        """
        def f(server_args: ServerArgs):
            def g(server_args: int):
                return server_args.page_size
            return g
        """,
    )
    INVALID = (
        Invalid(
            """
            def f(args: ServerArgs):
                return args.page_size
            """,
            (("parameter", "page_size"),),
        ),
        Invalid(
            """
            def f(server_args):
                return server_args.page_size
            """,
            (("parameter", "page_size"),),
        ),
        Invalid(
            """
            async def f(*, a: "ServerArgs", b: Optional[sgconf.ServerArgs] = None):
                return a.tp_size + b.dp_size
            """,
            (("parameter", "tp_size"), ("parameter", "dp_size")),
        ),
        Invalid(
            """
            g = lambda server_args: server_args.page_size
            """,
            (("parameter", "page_size"),),
        ),
        Invalid(
            """
            def f(sa: ServerArgs | None):
                def inner():
                    return sa.page_size
                return inner
            """,
            (("parameter", "page_size"),),
        ),
    )

    def matches(self, access: Access) -> bool:
        return access.base == "parameter"


#: Precedence order: the first rule that matches names the kind.
RULES: tuple[Rule, ...] = (
    WriteRule(),
    ComputedRule(),
    GetattrRule(),
    DirectRule(),
    AliasRule(),
    AttributeRule(),
    ParameterRule(),
)

RULES_BY_KIND: dict[str, Rule] = {rule.kind: rule for rule in RULES}


def classify(access: Access) -> str:
    """The kind of `access`: the first rule in `RULES` that matches it."""
    for rule in RULES:
        if rule.matches(access):
            return rule.kind
    raise ValueError(f"no rule matches {access!r}")
