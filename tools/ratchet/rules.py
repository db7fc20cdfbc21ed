"""One class per kind of raw access, each carrying its own VALID / INVALID snippet tables.

The scanner works out, for every access to a declared field, what the record was
reached through (`Access`); the first rule that `matches` names the kind. Rules are
checked in `RULES` order, so a write through an alias is a `write`, and a `getattr`
on a parameter is a `getattr`.

The tables are Fixit-style: a VALID snippet must produce no site at all, an INVALID
snippet exactly the sites it lists. `tests/tools/test_rules.py` turns every row into a
test, so a rule and its examples are read (and kept) together. The rules for reads
through a name (`direct`, `alias`) live in `tools.ratchet.name_rules`, the base classes
in `tools.ratchet.rule_base`.
"""

from __future__ import annotations

from tools.ratchet.name_rules import AliasRule, DirectRule
from tools.ratchet.rule_base import Access, Invalid, Rule


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
    axis = "via"
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


class ComputedRule(Rule):
    kind = "computed"
    axis = "via"
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
