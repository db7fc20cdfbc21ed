"""The log's `Prefix` and the writes' `Stack`: each state's sequence never changes, whatever later states do."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from runtime.state import EMPTY_STACK, NONE, Prefix, Stack

# an operation on one of the versions made so far: append/push a new item, or pop/take one out
ops = st.lists(st.tuples(st.sampled_from(["add", "drop"]), st.integers(0, 50), st.integers(0, 50)), max_size=60)


@given(ops)
def test_every_prefix_keeps_its_items_when_any_version_is_extended(steps: list[tuple[str, int, int]]) -> None:
    versions: list[tuple[Prefix[int], tuple[int, ...]]] = [(NONE, ())]
    for n, (_, pick, item) in enumerate(steps):
        prefix, model = versions[pick % len(versions)]
        versions.append((prefix.plus(n * 100 + item), (*model, n * 100 + item)))
    for prefix, model in versions:
        assert tuple(prefix) == model
        assert len(prefix) == len(model)
        assert prefix[:] == model
        assert prefix[-3:] == model[-3:]
        if model:
            assert prefix[-1] == model[-1]
            assert prefix[0] == model[0]
    assert len(NONE) == 0 and list(NONE) == []


@given(ops)
def test_every_stack_keeps_its_items_when_any_version_is_pushed_or_popped(steps: list[tuple[str, int, int]]) -> None:
    items = [object() for _ in range(len(steps))]
    versions: list[tuple[Stack[object], tuple[object, ...]]] = [(EMPTY_STACK, ())]
    for n, (op, pick, which) in enumerate(steps):
        stack, model = versions[pick % len(versions)]
        if op == "add" or not model:
            versions.append((stack.push(items[n]), (*model, items[n])))
        else:
            gone = model[which % len(model)]
            versions.append((stack.without(gone), tuple(x for x in model if x is not gone)))
    for stack, model in versions:
        assert tuple(stack) == model
        assert len(stack) == len(model)
        assert bool(stack) == bool(model)
        assert list(stack.newest_first()) == list(reversed(model))
        assert (stack.top if model else None) is (model[-1] if model else None)
        assert all(x in stack for x in model)
        assert Stack.of(model).size == len(model)


def test_an_older_prefix_does_not_see_what_a_newer_one_appended() -> None:
    one = NONE.plus("a")
    two = one.plus("b")
    branch = one.plus("c")  # not the newest prefix of its list: its own copy
    assert (tuple(one), tuple(two), tuple(branch)) == (("a",), ("a", "b"), ("a", "c"))
    assert two.plus("d")[:] == ("a", "b", "d")
    assert tuple(two) == ("a", "b")
