"""Did-you-mean ranking: edit distance first, then the shared prefix, then truncations."""

from __future__ import annotations

import pytest

from sgconf.serving import fields
from sgconf.suggest import did_you_mean, max_edits, rank

FLAGS = [flag for info in fields().values() for flag in info.flags]


@pytest.mark.parametrize(
    ("typed", "best"),
    [
        ("--tp-sise", "--tp-size"),  # one edit from --tp-size and two from --dp-size
        ("--tpsize", "--tp-size"),
        ("--dp-sze", "--dp-size"),
        ("--pgae-size", "--page-size"),  # a swap of two neighbours is one edit
        ("--modle-path", "--model-path"),
        ("--max-running", "--max-running-requests"),  # a truncation
        ("--page", "--page-size"),
        ("--mem-fraction", "--mem-fraction-static"),
        ("--tensor-parallel", "--tensor-parallel-size"),  # aliases are candidates too
    ],
)
def test_best_flag_for_a_typo(typed: str, best: str) -> None:
    """The best-ranked flag for a typo is the one a user meant."""
    assert rank(typed, FLAGS)[0] == best


def test_shared_prefix_breaks_ties_between_equal_distances() -> None:
    """Among flags one edit away, the one sharing the longer start ranks first."""
    assert rank("--tp-sise", ["--dp-size", "--ep-size", "--tp-size"]) == ["--tp-size", "--dp-size", "--ep-size"]


def test_unrelated_names_get_no_suggestion() -> None:
    """A name far from every candidate gets no suggestion rather than a random one."""
    assert did_you_mean("--x", FLAGS, normalize=False) == ""
    assert did_you_mean("--qqqq-zzzz", FLAGS, normalize=False) == ""
    assert rank("--tp", ["--dtype"]) == []  # the suggestion difflib made before


def test_truncations_rank_after_close_typos_shortest_first() -> None:
    """A typed start completes to candidates only after every close typo, shortest completion first."""
    assert rank("--page", ["--page-size-limit", "--page-size", "--pages"]) == [
        "--pages",
        "--page-size",
        "--page-size-limit",
    ]


def test_max_edits_grows_with_the_name() -> None:
    """Short names allow one edit, longer ones about a third of their length."""
    assert [max_edits(n) for n in ("tp", "--tp", "page_size", "speculative_num_steps")] == [1, 1, 3, 7]


def test_did_you_mean_normalizes_field_names() -> None:
    """Field names are compared with dashes folded to underscores and case folded."""
    assert did_you_mean("Page-Sise", ["page_size", "port"]) == " -- did you mean 'page_size'?"
