"""The rules for a field read through a name: the record got straight from its getter (`direct`), or a local alias (`alias`).

Each carries its VALID / INVALID tables (see `tools.ratchet.rules`).
"""

from __future__ import annotations

from tools.ratchet.rule_base import Invalid, Rule


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


__all__ = ["AliasRule", "DirectRule"]
