"""No reader can change config behind the context's back: every reachable container of every bag is frozen."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import get_context, get_memory, override_server_args
from sgconf import Schema, setting

# JSON-like values: what a dict- or list-valued setting may hold
_leaf = st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=3)
_json = st.recursive(
    _leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)


def _schema() -> Schema:
    schema = Schema("deep", env_prefix="DEEP_")

    @schema.namespace("plugins")
    class PluginsConfig:
        options: dict[str, Any] = setting(factory=dict, help="plugin options", hot=True)
        order: list[Any] = setting(factory=list, help="plugin order", hot=True)

    return schema.freeze()


SCHEMA = _schema()


def _containers(value: Any) -> Iterator[Any]:
    """Every container reachable from `value`, depth first (bags, mappings, sequences)."""
    if attrs.has(type(value)):
        for a in attrs.fields(type(value)):
            yield from _containers(getattr(value, a.name))
    elif isinstance(value, dict):
        yield value
        for v in value.values():
            yield from _containers(v)
    elif isinstance(value, (list, tuple)):
        yield value
        for v in value:
            yield from _containers(v)


def _try_mutations(container: Any) -> tuple[int, int]:
    """Attempt every mutation a reader might try; return (refused with TypeError or AttributeError, attempted)."""
    attempts = []
    if isinstance(container, dict):
        attempts = [
            lambda: container.__setitem__("mutated", 1),
            lambda: container.update(mutated=1),
            lambda: container.setdefault("mutated", 1),
            lambda: container.pop(next(iter(container)), None) if container else container.__setitem__("m", 1),
            lambda: container.clear(),
        ]
    else:
        attempts = [lambda: container.append(1), lambda: container.__setitem__(0, 1), lambda: container.extend([1])]
    refused = 0
    for attempt in attempts:
        try:
            attempt()
        except (TypeError, AttributeError):
            refused += 1
    return refused, len(attempts)


@settings(max_examples=60, deadline=None)
@given(options=st.dictionaries(st.text(max_size=3), _json, max_size=4), order=st.lists(_json, max_size=4))
def test_mutating_every_reachable_container_changes_nothing(options: dict[str, Any], order: list[Any]) -> None:
    """Record, bags, generation and fingerprint are unchanged after trying to mutate everything reachable."""
    with override_server_args(schema=SCHEMA) as ctx:
        ctx.override("test", options=options, order=order)
        before = (ctx.record, ctx.snapshot(), ctx.generation, ctx.fingerprint(), ctx.resolved_dict())
        reachable = [*_containers(ctx.record), *_containers(ctx.snapshot().plugins), *_containers(ctx.value("options"))]
        attempts = {id(c): c for c in reachable}
        for container in attempts.values():
            refused, tried = _try_mutations(container)
            assert refused == tried, container
        after = (ctx.record, ctx.snapshot(), ctx.generation, ctx.fingerprint(), ctx.resolved_dict())
        assert after == before
        assert ctx.resolved_dict()["plugins"] == {"options": options, "order": order}


def test_serving_bag_dict_cannot_be_changed_in_place() -> None:
    """The attach extra config in the memory bag refuses item assignment; the fingerprint stays."""
    with override_server_args(enable_hierarchical_cache=True, hicache_storage_backend_extra_config={"dir": "/a"}):
        ctx = get_context()
        fp = ctx.fingerprint()
        with pytest.raises(TypeError, match="config values are read-only"):
            get_memory().hicache_storage_backend_extra_config["dir"] = "/x"  # type: ignore[index]
        assert get_memory().hicache_storage_backend_extra_config == {"dir": "/a"}
        assert ctx.record.hicache_storage_backend_extra_config == {"dir": "/a"} and ctx.fingerprint() == fp


def _reachable_calls(d: Any) -> dict[str, Any]:
    """Every way a caller reaches to change a FrozenDict in place, through its own methods and dunders."""
    return {
        "__init__": lambda: d.__init__({"dir": "/x"}),
        "__init__ kwargs": lambda: d.__init__(dir="/x"),
        "__setitem__": lambda: d.__setitem__("dir", "/x"),
        "__delitem__": lambda: d.__delitem__("dir"),
        "__ior__": lambda: d.__ior__({"dir": "/x"}),
        "clear": d.clear,
        "pop": lambda: d.pop("dir"),
        "popitem": d.popitem,
        "setdefault": lambda: d.setdefault("new", 1),
        "update": lambda: d.update(dir="/x"),
        "_hash": lambda: setattr(d, "_hash", 0),
        "del _hash": lambda: delattr(d, "_hash"),
        "__class__": lambda: setattr(d, "__class__", dict),
        "new attribute": lambda: setattr(d, "extra", 1),
    }


@pytest.mark.parametrize("how", sorted(_reachable_calls({})))
def test_a_frozen_dict_refuses_every_reachable_mutation(how: str) -> None:
    """Re-initialising, a new hash or a new class would change a live bag with no new generation: all refused."""
    with override_server_args(enable_hierarchical_cache=True, hicache_storage_backend_extra_config={"dir": "/a"}):
        ctx = get_context()
        fp, generation = ctx.fingerprint(), ctx.generation
        held = get_memory().hicache_storage_backend_extra_config
        before = hash(held)
        with pytest.raises(TypeError, match="config values are read-only"):
            _reachable_calls(held)[how]()
        assert (
            get_memory().hicache_storage_backend_extra_config == {"dir": "/a"} and type(held).__name__ == "FrozenDict"
        )
        assert hash(held) == before == hash(type(held)({"dir": "/a"}))
        assert (ctx.fingerprint(), ctx.generation) == (fp, generation)
