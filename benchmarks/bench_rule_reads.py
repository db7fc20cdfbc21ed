"""Per-call cost of running rules on their declared fields only, against handing them the values directly.

An override re-checks the rules that read the fields it changes (`runtime.proposal`, through
`sgconf.rules.check_rules`, over an `Overlay` of the change on the published values), and
every rule now runs on a `DeclaredReads` view of its declared fields. Printed, per rule
call, over plain values (resolution) and over an `Overlay` (an override): the check
called directly through one `__call__` (how rules ran before the reads were enforced; no
`check_rules` bookkeeping, so the comparison is on the safe side), then `check_rules`
running them on the view, for all serving rules at once and for the one rule an
override of `speculative_num_steps` re-checks.
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


def least(fn: Callable[[], object]) -> float:
    return min(timeit.repeat(fn, number=NUMBER, repeat=REPEAT)) / NUMBER


def compare(label: str, rules: Sequence[Any], values: Any) -> None:
    direct = [Direct(rule.check) for rule in rules]

    def before() -> None:
        for rule in direct:
            rule(values)

    def after() -> None:
        check_rules(values, schema=SERVING, rules=rules)

    # interleaved rounds, the least of each: on a shared machine the quietest moments compare
    old = new = float("inf")
    for _ in range(ROUNDS):
        old, new = min(old, least(before)), min(new, least(after))
    n = len(rules)
    print(
        f"{label:>22}: {n:>2} rule(s), per call {old / n * 1e9:.0f} ns direct, "
        f"{new / n * 1e9:.0f} ns on the view, {(new - old) / n * 1e9:+.0f} ns"
    )


def main() -> None:
    flat = {name: info.default for name, info in fields().items()}
    overlay = Overlay({"speculative_num_steps": 3}, flat)
    one = rules_reading(SERVING, {"speculative_num_steps"})
    compare("all rules, values", list(RULES), flat)
    compare("all rules, overlay", list(RULES), overlay)
    compare("one override's rules", one, overlay)


if __name__ == "__main__":
    main()
