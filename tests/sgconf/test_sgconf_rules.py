"""Cross-field rules fire at load with the flag names involved."""

from __future__ import annotations

import pytest

from sgconf import ConfigError, load

RULE_CASES = [
    (
        "dp_attention",
        ["--enable-dp-attention", "--tp-size", "4", "--dp-size", "3"],
        "$.parallel.tp_size: --tp-size 4 must be divisible by --dp-size 3 when --enable-dp-attention is set",
    ),
    (
        "spec_without_algorithm",
        ["--speculative-num-steps", "2"],
        "$.spec.speculative_algorithm: --speculative-num-steps set without --speculative-algorithm",
    ),
    (
        "topk_one_draft_tokens",
        "--speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 5".split(),
        "$.spec.speculative_algorithm: --speculative-num-draft-tokens 5 must equal --speculative-num-steps + 1 = 4 "
        "when --speculative-eagle-topk is 1",
    ),
    (
        "draft_tokens_exceed_tree",
        "--speculative-algorithm EAGLE --speculative-num-steps 2 --speculative-eagle-topk 2 --speculative-num-draft-tokens 9".split(),
        "--speculative-num-draft-tokens 9 exceeds --speculative-num-steps * --speculative-eagle-topk + 1 = 5",
    ),
    (
        "hicache_needs_enable",
        ["--hicache-ratio", "3"],
        "$.memory.enable_hierarchical_cache: --hicache-ratio requires --enable-hierarchical-cache",
    ),
    (
        "hicache_needs_radix",
        ["--enable-hierarchical-cache", "--disable-radix-cache"],
        "--enable-hierarchical-cache needs the radix cache, but --disable-radix-cache is set",
    ),
    (
        "node_rank",
        ["--node-rank", "1"],
        "$.parallel.node_rank: --node-rank 1 must be below --nnodes 1 -- ranks count from 0; raise the node count or lower the rank",
    ),
    (
        "extra_slots",
        ["--disaggregation-decode-extra-slots", "2"],
        "--disaggregation-decode-extra-slots only applies with --disaggregation-mode decode (got 'null') "
        "-- set --disaggregation-mode decode or drop the extra slots",
    ),
]


@pytest.mark.parametrize(("argv", "fragment"), [c[1:] for c in RULE_CASES], ids=[c[0] for c in RULE_CASES])
def test_rule_names_the_flags(argv: list[str], fragment: str) -> None:
    """Each violated rule is one problem naming its flags, sourced from the command line."""
    with pytest.raises(ConfigError) as info:
        load(argv, env={})
    (line,) = info.value.lines()
    assert fragment in line
    message, _, sources = line.rpartition(" (")
    assert sources.endswith(")")
    assert set(sources[:-1].split("; ")) == {f"from {a}" for a in argv if a.startswith("--")}


def test_rules_pass_for_consistent_settings() -> None:
    """Consistent values across the same fields load fine."""
    rec = load(
        (
            "--enable-dp-attention --tp-size 4 --dp-size 2 --speculative-algorithm EAGLE --speculative-num-steps 3"
            " --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --enable-hierarchical-cache --hicache-ratio 3"
        ).split(),
        env={},
    ).record
    assert (rec.tp_size, rec.speculative_num_draft_tokens, rec.hicache_ratio) == (4, 4, 3.0)
