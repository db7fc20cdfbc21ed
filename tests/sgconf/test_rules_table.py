"""Every cross-field rule on both sides of its boundary, and how `check_rules` filters and sources them."""

from __future__ import annotations

from typing import Any

import pytest

from sgconf import RULES, Rule, check_rules
from sgconf.errors import Problem
from sgconf.serving import fields

RULE = {r.name: r for r in RULES}
SPEC_FLAGS = (
    "--speculative-num-steps, --speculative-eagle-topk, --speculative-num-draft-tokens, "
    "--max-speculative-num-draft-tokens, --speculative-draft-model-path"
)


def values(**changed: Any) -> dict[str, Any]:
    out = {name: info.default for name, info in fields().items()}
    out.update(changed)
    return out


EAGLE = {"speculative_algorithm": "EAGLE"}

# (rule, changed values, message or None)
CASES = [
    ("dp_attention_divides_tp", {"tp_size": 4, "dp_size": 3}, None),
    ("dp_attention_divides_tp", {"enable_dp_attention": True, "tp_size": 4, "dp_size": 2}, None),
    (
        "dp_attention_divides_tp",
        {"enable_dp_attention": True, "tp_size": 4, "dp_size": 3},
        "--tp-size 4 must be divisible by --dp-size 3 when --enable-dp-attention is set -- pick a dp size that divides the tp size",
    ),
    ("spec_needs_algorithm", {}, None),
    ("spec_needs_algorithm", {**EAGLE, "speculative_num_steps": 2}, None),
    *[
        (
            "spec_needs_algorithm",
            {name: 2},
            f"{flag} set without --speculative-algorithm -- set an algorithm or drop the speculative flags",
        )
        for name, flag in [
            ("speculative_num_steps", "--speculative-num-steps"),
            ("speculative_eagle_topk", "--speculative-eagle-topk"),
            ("speculative_num_draft_tokens", "--speculative-num-draft-tokens"),
            ("max_speculative_num_draft_tokens", "--max-speculative-num-draft-tokens"),
            ("speculative_draft_model_path", "--speculative-draft-model-path"),
        ]
    ],
    (
        "spec_needs_algorithm",
        {
            "speculative_num_steps": 1,
            "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 2,
            "max_speculative_num_draft_tokens": 2,
            "speculative_draft_model_path": "d",
        },
        f"{SPEC_FLAGS} set without --speculative-algorithm -- set an algorithm or drop the speculative flags",
    ),
    # the tree rule only judges tree algorithms with all three values known
    (
        "spec_tree_consistent",
        {
            "speculative_algorithm": "FROZEN_KV_MTP",
            "speculative_num_steps": 3,
            "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 9,
        },
        None,
    ),
    ("spec_tree_consistent", {**EAGLE, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 9}, None),
    ("spec_tree_consistent", {**EAGLE, "speculative_num_steps": 3, "speculative_num_draft_tokens": 9}, None),
    ("spec_tree_consistent", {**EAGLE, "speculative_num_steps": 3, "speculative_eagle_topk": 1}, None),
    (
        "spec_tree_consistent",
        {**EAGLE, "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4},
        None,
    ),
    (
        "spec_tree_consistent",
        {**EAGLE, "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 3},
        "--speculative-num-draft-tokens 3 must equal --speculative-num-steps + 1 = 4 when --speculative-eagle-topk is 1 "
        "-- drop --speculative-num-draft-tokens to take the default",
    ),
    # topk 2, steps 2: anything up to 2*2 + 1 = 5 draft tokens, and not tied to steps + 1
    (
        "spec_tree_consistent",
        {**EAGLE, "speculative_num_steps": 2, "speculative_eagle_topk": 2, "speculative_num_draft_tokens": 5},
        None,
    ),
    (
        "spec_tree_consistent",
        {**EAGLE, "speculative_num_steps": 2, "speculative_eagle_topk": 2, "speculative_num_draft_tokens": 2},
        None,
    ),
    (
        "spec_tree_consistent",
        {
            "speculative_algorithm": "NEXTN",
            "speculative_num_steps": 2,
            "speculative_eagle_topk": 2,
            "speculative_num_draft_tokens": 6,
        },
        "--speculative-num-draft-tokens 6 exceeds --speculative-num-steps * --speculative-eagle-topk + 1 = 5 "
        "-- lower it or draft more steps",
    ),
    ("spec_capacity", {"speculative_num_draft_tokens": 4, "max_speculative_num_draft_tokens": 4}, None),
    ("spec_capacity", {"speculative_num_draft_tokens": 4}, None),
    ("spec_capacity", {"max_speculative_num_draft_tokens": 1}, None),
    (
        "spec_capacity",
        {"speculative_num_draft_tokens": 4, "max_speculative_num_draft_tokens": 3},
        "--max-speculative-num-draft-tokens 3 is below --speculative-num-draft-tokens 4 "
        "-- the capacity pools are sized for must cover the draft tokens",
    ),
    ("hicache_needs_enable", {}, None),
    ("hicache_needs_enable", {"enable_hierarchical_cache": True, "hicache_size": 4}, None),
    (
        "hicache_needs_enable",
        {"hicache_size": 4, "hicache_storage_prefetch_timeout_s": 9.0},
        "--hicache-size, --hicache-storage-prefetch-timeout-s requires --enable-hierarchical-cache "
        "-- enable the hierarchical cache at launch",
    ),
    ("hicache_needs_radix", {"enable_hierarchical_cache": True}, None),
    ("hicache_needs_radix", {"disable_radix_cache": True}, None),
    (
        "hicache_needs_radix",
        {"enable_hierarchical_cache": True, "disable_radix_cache": True},
        "--enable-hierarchical-cache needs the radix cache, but --disable-radix-cache is set -- drop one of the two",
    ),
    ("node_rank_in_range", {"nnodes": 2, "node_rank": 1}, None),
    (
        "node_rank_in_range",
        {"nnodes": 2, "node_rank": 2},
        "--node-rank 2 must be below --nnodes 2 -- ranks count from 0; raise the node count or lower the rank",
    ),
    ("multi_node_needs_addr", {"nnodes": 1}, None),
    ("multi_node_needs_addr", {"nnodes": 2, "dist_init_addr": "h:1"}, None),
    ("multi_node_needs_addr", {"nnodes": 2}, "--nnodes 2 needs --dist-init-addr -- give the rank-0 host:port"),
    ("extra_slots_need_decode", {"disaggregation_mode": "prefill"}, None),
    ("extra_slots_need_decode", {"disaggregation_mode": "decode", "disaggregation_decode_extra_slots": 2}, None),
    (
        "extra_slots_need_decode",
        {"disaggregation_mode": "prefill", "disaggregation_decode_extra_slots": 2},
        "--disaggregation-decode-extra-slots only applies with --disaggregation-mode decode (got 'prefill') "
        "-- set --disaggregation-mode decode or drop the extra slots",
    ),
]


@pytest.mark.parametrize(("rule", "changed", "message"), CASES)
def test_rule_boundaries(rule: str, changed: dict[str, Any], message: str | None) -> None:
    """Each rule passes just inside its boundary and names its flags just outside it."""
    assert RULE[rule](values(**changed)) == message


def test_check_rules_sources_and_path() -> None:
    """One problem per violated rule, at the rule's first field, with its fields' sources once each, in order."""
    bad = values(enable_dp_attention=True, tp_size=4, dp_size=3, nnodes=2)
    sources = {
        "tp_size": "from --tp-size",
        "enable_dp_attention": "from --tp-size",
        "dp_size": "from env SGCONF_DP_SIZE",
    }
    problems = check_rules(bad, sources)
    assert [(p.path, p.source) for p in problems] == [
        ("$.parallel.tp_size", "from --tp-size; from env SGCONF_DP_SIZE"),
        ("$.parallel.nnodes", None),
    ]
    assert check_rules(values()) == []


def test_check_rules_only_touching_skips_unrelated_and_launch_only_rules() -> None:
    """An override re-checks only the rules it could break, never the launch-only capacity rule."""
    bad = values(nnodes=2, speculative_num_draft_tokens=4, max_speculative_num_draft_tokens=3, **EAGLE)
    assert [p.path for p in check_rules(bad)] == ["$.spec.speculative_num_draft_tokens", "$.parallel.nnodes"]
    assert [p.path for p in check_rules(bad, only_touching={"dist_init_addr"})] == ["$.parallel.nnodes"]
    assert check_rules(bad, only_touching={"speculative_num_draft_tokens"}) == []
    assert check_rules(bad, only_touching=set()) == []


def test_check_rules_takes_a_rule_list() -> None:
    """A runtime's own rule list replaces the built-in one; its message is reported at its first field."""
    mine = Rule("page_even", ("page_size", "tp_size"), lambda v: "odd" if v["page_size"] % 2 else None)
    assert mine.launch_only is False
    assert check_rules(values(page_size=3, nnodes=2), {"tp_size": "from t"}, rules=[mine]) == [
        Problem("$.schedule.page_size", "odd", "from t")
    ]
    assert check_rules(values(page_size=3), rules=[]) == []


def test_only_the_rules_a_change_touches_run_and_a_rule_added_later_is_found() -> None:
    """`only_touching` runs the rules reading a touched field (never launch-only ones), from an index kept current."""
    from sgconf import Schema, setting
    from sgconf.rules import check_rules as check

    ran: list[str] = []

    def rule(name: str, *fields: str, launch_only: bool = False) -> Rule:
        return Rule(name, fields, lambda v: ran.append(name) or f"{name} broke", launch_only=launch_only)

    schema = Schema("touchrt", env_prefix="TOUCHRT_")

    @schema.namespace("core")
    class Core:
        a: int = setting(1, help="a")
        b: int = setting(2, help="b")
        c: int = setting(3, help="c")

    schema.rules.extend([rule("ab", "a", "b"), rule("c", "c"), rule("launch", "a", launch_only=True)])
    schema.freeze()
    values = {"a": 1, "b": 2, "c": 3}
    assert [p.path for p in check(values, schema=schema, only_touching={"b"})] == ["$.core.a"]
    assert ran == ["ab"]
    assert [p.message for p in check(values, schema=schema, only_touching={"c", "a"})] == ["ab broke", "c broke"]
    schema.rules.append(rule("late", "c"))
    ran.clear()
    check(values, schema=schema, only_touching={"c"})
    assert ran == ["c", "late"]
    ran.clear()
    check(values, schema=schema, rules=[rule("given", "b"), rule("other", "a")], only_touching={"b"})
    assert ran == ["given"]
    ran.clear()
    check(values, schema=schema)
    assert ran == ["ab", "c", "launch", "late"]


def test_a_rule_or_step_reading_an_undeclared_field_is_named() -> None:
    """A rule sees only its declared fields: an undeclared read names the rule and the field, even on a copy."""
    from sgconf import Schema, Step, setting
    from sgconf.errors import DeclarationError, UndeclaredReadError

    schema = Schema("readrt", env_prefix="READRT_")

    @schema.namespace("a")
    class A:
        x: int = setting(1, help="x", hot=True)

    @schema.namespace("b")
    class B:
        y: int = setting(2, help="y")

    schema.rules.append(Rule("r", ("x",), lambda v: None if v["x"] <= v["y"] else "x above y"))
    undeclared = "rule 'r' read 'y', which it does not declare -- add it to the rule's fields"
    with pytest.raises(UndeclaredReadError, match=undeclared) as info:
        schema.load([], env={})
    assert isinstance(info.value, DeclarationError)
    copy = schema.copy("readrt2", without=["b"])
    with pytest.raises(UndeclaredReadError, match=undeclared):
        copy.load([], env={})
    rule = Rule("g", ("x",), lambda v: "y" in v or v.get("y"))
    for values in ({"x": 1, "y": 2}, {"x": 1}):
        with pytest.raises(UndeclaredReadError, match="rule 'g' read 'y'"):
            rule(values)
    assert Rule("ok", ("x",), lambda v: f"{dict(v)} {'x' in v} {v.get('x')}")({"x": 1, "y": 2}) == "{'x': 1} True 1"
    step = Step("s", ("x",), lambda v, inputs: {"x": (v["y"], "copied")})
    with pytest.raises(UndeclaredReadError, match="resolution step 's' read 'y', which it does not declare"):
        step({"x": 1, "y": 2}, None)
