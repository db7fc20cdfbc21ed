"""Per-call cost of running rules on their declared fields only, against handing them the values directly.

An override re-checks the rules that read the fields it changes (`runtime.proposal`, through
`sgconf.rules.check_rules`, over an `Overlay` of the change on the published values), and
every rule now runs on a `DeclaredReads` view of its declared fields (one view per
`check_rules` call, pointed at each rule in turn). Printed, over plain values
(resolution) and over an `Overlay` (an override): `check_rules` as it ran before the
reads were enforced (`before`: each rule called with the values through one `__call__`)
and as it runs now, per call and per rule, for all serving rules at once and for the
rules one override re-checks (`tp_size`: one rule; `enable_hierarchical_cache`: two,
reading 11 fields). Every value here passes every rule, so no problem is built on either side.
Goal (nothing here gates CI): the view adds at most ~0.3 us per rule call.

Run: `.venv/bin/python benchmarks/bench_rule_reads.py`.
"""

from __future__ import annotations

import timeit
from collections.abc import Callable, Sequence
from typing import Any

from runtime.flatview import Overlay
from sgconf.rules import check_rules, rules_reading
from sgconf.serving import RULES, SERVING, fields

ROUNDS = 10
REPEAT = 5
NUMBER = 10_000


class Direct:
    """A rule that hands its check the values as they are, as `Rule.__call__` did before."""

    __slots__ = ("check",)

    def __init__(self, check: Callable[[Any], str | None]) -> None:
        self.check = check

    def __call__(self, values: Any) -> str | None:
        return self.check(values)


def before(values: Any, rules: Sequence[Direct]) -> list[Any]:
    """`check_rules` before the view, for values every rule passes (its bookkeeping, then the loop)."""
    sources: dict[str, str] = {}
    problems: list[Any] = []
    lookup = SERVING.field_info
    for rule in rules:
        message = rule(values)
        if message is None:
            continue
        problems.append((lookup, sources, message))  # never reached: every rule passes here
    return problems


def least(fn: Callable[[], object]) -> float:
    return min(timeit.repeat(fn, number=NUMBER, repeat=REPEAT)) / NUMBER


def compare(label: str, rules: Sequence[Any], values: Any) -> None:
    direct = [Direct(rule.check) for rule in rules]

    def then() -> None:
        before(values, direct)

    def now() -> None:
        check_rules(values, schema=SERVING, rules=rules)

    # interleaved rounds, the least of each: on a shared machine the quietest moments compare
    old = new = float("inf")
    for _ in range(ROUNDS):
        old, new = min(old, least(then)), min(new, least(now))
    n = len(rules)
    print(
        f"{label:>34}: {n:>2} rule(s), check_rules {old * 1e9:.0f} -> {new * 1e9:.0f} ns,"
        f" {(new - old) / n * 1e9:+.0f} ns per rule call"
    )


def main() -> None:
    flat = {name: info.default for name, info in fields().items()}
    assert check_rules(flat, schema=SERVING, rules=list(RULES)) == []
    compare("all rules, values", list(RULES), flat)
    compare("all rules, overlay", list(RULES), Overlay({"tp_size": 2}, flat))
    for name, value in (("tp_size", 2), ("enable_hierarchical_cache", True)):
        overlay = Overlay({name: value}, flat)
        assert check_rules(overlay, schema=SERVING, rules=list(RULES)) == []
        compare(f"override {name}", rules_reading(SERVING, {name}), overlay)


if __name__ == "__main__":
    main()
