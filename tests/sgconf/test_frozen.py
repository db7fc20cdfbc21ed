"""Deep immutability: list- and dict-valued settings are stored as tuples and read-only mappings, recursively."""

from __future__ import annotations

import collections.abc
import copy
import json
import pickle
import typing
from typing import Any

import attrs
import pytest

from sgconf import (
    FrozenDict,
    ServerArgs,
    deep_freeze,
    load,
    nested,
    record_to_dict,
    to_bags,
)
from sgconf.frozen import may_hold_container, thaw


@attrs.define
class _Attrs:
    a: int = 1


def test_deep_freeze_turns_containers_into_frozen_ones() -> None:
    """Lists become tuples and dicts FrozenDicts at every depth; scalars and frozen values are kept as they are."""
    value = deep_freeze({"a": [1, {"b": [2, 3]}], "c": "x"})
    assert value == {"a": (1, {"b": (2, 3)}), "c": "x"}
    assert type(value) is FrozenDict and type(value["a"]) is tuple and type(value["a"][1]) is FrozenDict
    assert deep_freeze(value) is value and deep_freeze("s") == "s"
    assert thaw(value) == {"a": [1, {"b": [2, 3]}], "c": "x"} and type(thaw(value)["a"]) is list


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.__setitem__("k", 1),
        lambda d: d.__delitem__("dir"),
        lambda d: d.update(k=1),
        lambda d: d.pop("dir"),
        lambda d: d.popitem(),
        lambda d: d.setdefault("k", 1),
        lambda d: d.clear(),
    ],
)
def test_every_mutation_of_a_frozen_dict_raises_type_error(mutate) -> None:
    """Each mutating method of a FrozenDict raises TypeError with the sanctioned alternative and changes nothing."""
    d = FrozenDict({"dir": "/a"})
    with pytest.raises(TypeError, match="config values are read-only.* -- use get_context\\(\\).override"):
        mutate(d)
    assert d == {"dir": "/a"}


def test_frozen_dicts_hash_copy_pickle_and_dump_like_plain_objects() -> None:
    """A FrozenDict hashes, copies to itself, pickles, and dumps as a JSON object."""
    d = FrozenDict({"dir": "/a", "n": [1, 2]})
    assert hash(d) == hash(FrozenDict({"n": (1, 2), "dir": "/a"}))
    assert copy.deepcopy(d) is d and copy.copy(d) is d
    assert pickle.loads(pickle.dumps(d)) == d and type(pickle.loads(pickle.dumps(d))) is FrozenDict
    assert json.loads(json.dumps(d)) == {"dir": "/a", "n": [1, 2]}


def test_record_and_bags_hold_frozen_values() -> None:
    """A dict given to the record (directly or by loading) is stored frozen in the record and in every bag."""
    record = ServerArgs(enable_hierarchical_cache=True, hicache_storage_backend_extra_config={"dir": "/a", "l": [1]})
    extra = record.hicache_storage_backend_extra_config
    assert type(extra) is FrozenDict and extra["l"] == (1,)
    assert to_bags(record)["memory"].hicache_storage_backend_extra_config is extra
    loaded = load(["--enable-hierarchical-cache", "--hicache-storage-backend-extra-config", '{"dir": "/b"}'], env={})
    assert type(loaded.record.hicache_storage_backend_extra_config) is FrozenDict
    with pytest.raises(TypeError):
        loaded.record.hicache_storage_backend_extra_config["dir"] = "/x"


def test_dumps_show_plain_lists_and_objects() -> None:
    """`nested()` (show --format json, /server_info) hands out plain, mutable dicts and lists."""
    record = ServerArgs(enable_hierarchical_cache=True, hicache_storage_backend_extra_config={"dir": "/a", "l": [1]})
    out = nested(record_to_dict(record))["memory"]["hicache_storage_backend_extra_config"]
    assert out == {"dir": "/a", "l": [1]} and type(out) is dict and type(out["l"]) is list


def test_a_built_frozen_dict_refuses_reinit_and_attribute_changes() -> None:
    bag = FrozenDict(a=1)
    for mutate in (lambda: bag.__init__(b=2), lambda: setattr(bag, "_hash", 1), lambda: delattr(bag, "_hash")):
        with pytest.raises(TypeError):
            mutate()
    assert dict(bag) == {"a": 1}
    assert repr(bag) == "FrozenDict({'a': 1})"
    assert hash(bag) == hash(bag) == hash(FrozenDict(a=1))


def test_freezing_a_tuple_keeps_it_when_already_frozen_and_copies_it_otherwise() -> None:
    plain = (1, "a")
    assert deep_freeze(plain) is plain
    holding = (1, [2])
    frozen = deep_freeze(holding)
    assert frozen == (1, (2,)) and frozen is not holding
    assert thaw(frozenset({2, 1})) == [1, 2]


class _Ratio(float):
    """A float subclass, as numpy's float64 is: it misses thaw's fast path for exact floats."""


def test_thaw_spells_only_non_finite_floats_as_text() -> None:
    assert thaw(1.5) == 1.5 and thaw(float("inf")) == "inf" and thaw(float("-inf")) == "-inf"
    assert thaw(float("nan")) == "nan"
    finite = _Ratio(1.5)
    assert thaw(finite) is finite
    assert thaw(_Ratio("inf")) == "inf" and thaw(_Ratio("nan")) == "nan"


class _CountsHashes:
    calls = 0

    def __hash__(self) -> int:
        _CountsHashes.calls += 1
        return 7


def test_a_frozen_dict_hashes_its_items_once() -> None:
    """The hash is cached: a large extra-config dict used as a cache key is not rehashed on every lookup."""
    d = FrozenDict(k=_CountsHashes())
    before = _CountsHashes.calls
    assert hash(d) == hash(d) == hash(d)
    assert _CountsHashes.calls == before + 1


@pytest.mark.parametrize(
    ("tp", "holds"),
    [
        (Any, True),
        ("list[int]", True),
        (typing.TypeVar("T"), True),
        (typing.Literal["a"], False),
        (int, False),
        (str, False),
        (list[int], True),
        (dict[str, int], True),
        (typing.Optional[int], False),  # noqa: UP045
        (typing.Optional[list[int]], True),  # noqa: UP045
        (collections.abc.Sequence[int], True),
        (collections.abc.Mapping[str, int], True),
        (typing.Annotated[int, "x"], True),  # its metadata is looked at too: freezing is the safe side
        (object, True),
        (_Attrs, True),  # a record-typed value: its fields may hold lists, so it is rebuilt frozen
    ],
)
def test_which_field_types_need_freezing(tp: Any, holds: bool) -> None:
    assert may_hold_container(tp) is holds
