"""Bounded settings: every number that may change after publish has a range, and a non-finite value is refused."""

from __future__ import annotations

import math
import typing

import pytest

from sgconf import load
from sgconf.errors import ConfigError
from sgconf.fields import FieldValueError, _Interval, at_least, interval
from sgconf.serving import fields

# sources an HTTP client can reach after publish (the overrides route and the storage endpoints)
REACHABLE_SOURCES = ("http.config_overrides", "hicache.attach", "hicache.detach")


def _is_number(tp: typing.Any) -> bool:
    if isinstance(tp, str):
        return any(name in tp.split(" | ") for name in ("int", "float"))
    args = typing.get_args(tp)
    return tp in (int, float) or any(a in (int, float) for a in args)


def _overridable_numbers() -> list[str]:
    out = []
    for name, info in fields().items():
        reachable = any(info.setting.source_allowed(s) for s in REACHABLE_SOURCES)
        if reachable and _is_number(info.type) and info.type not in (bool, "bool"):
            out.append(name)
    return out


def test_the_list_of_overridable_numbers_is_not_empty() -> None:
    """The scan finds the hot numbers it guards (so the next test cannot pass vacuously)."""
    assert {"stream_interval", "schedule_conservativeness", "request_timeout_s"} <= set(_overridable_numbers())


@pytest.mark.parametrize("name", _overridable_numbers())
def test_every_overridable_number_has_both_bounds(name: str) -> None:
    """A hot (or attachable) numeric field declares a closed range, so no override can set an absurd value."""
    ranges = [c for c in fields()[name].setting.checks if isinstance(c, _Interval)]
    assert ranges and all(r.low is not None and r.high is not None for r in ranges), name


def test_a_huge_stream_interval_is_refused_with_its_range() -> None:
    """stream_interval=10**400 from the command line names the field, the range and the flag."""
    with pytest.raises(ConfigError) as info:
        load(["--stream-interval", "1" + "0" * 400])
    (line,) = info.value.lines()
    assert line.startswith("$.serving.stream_interval: must be in [1, 65536], got 1000")
    assert line.endswith("(from --stream-interval)")


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (math.nan, r"must be a number in \[0, 100\], not nan"),
        (math.inf, r"must be in \[0, 100\]"),
        (-math.inf, r"must be in"),
    ],
)
def test_an_interval_refuses_nan_and_infinities_beyond_its_bounds(value: float, words: str) -> None:
    """NaN compares false with every bound; the interval check refuses it by name, and infinities by range."""
    with pytest.raises(FieldValueError, match=words):
        interval(0, 100)(value)


def test_a_one_sided_interval_admits_infinity_for_a_nonfinite_setting() -> None:
    at_least(0)(math.inf)
    with pytest.raises(FieldValueError, match="not nan"):
        at_least(0)(math.nan)


@pytest.mark.parametrize("flag", ["--admin-api-key", "--api-key"])
@pytest.mark.parametrize("key", ["", "   ", "\u00a0", "\t\n"])
def test_a_blank_key_is_refused_at_load(flag: str, key: str) -> None:
    """An empty or whitespace-only key guards nothing, so loading refuses it (and never echoes it)."""
    with pytest.raises(ConfigError) as info:
        load([flag, key])
    field = flag.removeprefix("--").replace("-", "_")
    assert info.value.lines() == [f"$.serving.{field}: must not be empty or only whitespace, got '***' (from {flag})"]
