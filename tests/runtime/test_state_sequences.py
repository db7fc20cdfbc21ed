"""A state's parts: the log's `Prefix` and the writes' `Stack` never change whatever later states do;
what shows under a write, whether two states carry the same changes, and folding old overrides."""

from __future__ import annotations

import types

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.state import EMPTY, EMPTY_STACK, NONE, Prefix, Stack, State, Write, fold, stacks_of

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


def test_appending_to_the_newest_prefix_shares_its_list() -> None:
    """The point of a prefix: the log grows without a copy; only a branch (or the shared empty one) copies."""
    one = NONE.plus("a")
    assert one._items is not NONE._items and NONE._items == []
    two = one.plus("b")
    assert two._items is one._items
    branch = one.plus("c")
    assert branch._items is not one._items


def test_a_prefix_indexes_only_its_own_items() -> None:
    longer = NONE.plus("a").plus("b")
    shorter = Prefix(longer._items, 1)  # a state from before "b"
    assert shorter[0] == "a" and shorter[-1] == "a"
    for bad in (1, -2, 5):
        with pytest.raises(IndexError, match="prefix index out of range"):
            shorter[bad]
    assert repr(shorter) == "Prefix(['a'])"
    assert repr(Stack.of(["a", "b"])) == "Stack(['a', 'b'])"


def _write(**values: object) -> Write:
    return Write(record=None, values=types.MappingProxyType(values))  # type: ignore[arg-type]


def _state(base: dict[str, object], *writes: Write) -> State:
    stack = Stack.of(writes)
    return State(None, None, {}, types.MappingProxyType(base), stack, stacks_of(stack), NONE, 0, EMPTY, None)  # type: ignore[arg-type]


def test_a_write_is_live_while_any_stack_holds_it() -> None:
    low, high = _write(x=1), _write(x=2)
    state = _state({"x": 0}, low, high)
    assert state.is_live(high) and state.is_live(low)
    assert not state.is_live(_write(x=3))
    assert state.top("x") is high and state.top("y") is None


def test_underneath_shows_the_write_below_or_the_base() -> None:
    low, high, other = _write(x=1), _write(x=2, y=5), _write(y=7)
    state = _state({"x": 0, "y": 0}, low, high, other)
    assert state.underneath(high) == {"x": 1, "y": 7}  # y: `other` lies above high, nothing changes
    assert state.underneath(low) == {"x": 2}  # x: high lies above it
    alone = _state({"x": 0}, low)
    assert alone.underneath(low) == {"x": 0}


def test_same_changes_compares_base_and_each_write_by_identity() -> None:
    a, b = _write(x=1), _write(y=2)
    base = {"x": 0, "y": 0}
    here = _state(base, a, b)
    assert here.same_changes(_state(dict(base), a, b))  # equal bases, the same writes
    assert here.same_changes(_state(base, a)) is False
    assert here.same_changes(_state(base, a, _write(y=2))) is False  # an equal write is not the same write
    assert not here.same_changes(_state({"x": 0, "y": 1}, a, b))
    assert _state(base).same_changes(_state(base))


def test_fold_keeps_the_limit_by_folding_down_to_half() -> None:
    writes = [_write(**{f"f{i}": i}) for i in range(5)]
    base = {f"f{i}": -1 for i in range(5)}
    assert fold(base, Stack.of(writes), 5) is None  # at the limit: nothing to do
    folded = fold(base, Stack.of(writes), 4)
    assert folded is not None
    new_base, kept = folded
    assert list(kept) == writes[3:]  # 5 - 4 // 2 = 3 folded, the oldest first
    assert dict(new_base) == {"f0": 0, "f1": 1, "f2": 2, "f3": -1, "f4": -1}
    one = fold(base, Stack.of(writes), 1)
    assert one is not None and list(one[1]) == writes[4:]  # never below one kept write


class _Published(dict):  # type: ignore[type-arg]
    """The published values, counting every walk over them."""

    walks = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        _Published.walks += 1
        return super().__iter__()

    def keys(self):  # type: ignore[no-untyped-def]
        _Published.walks += 1
        return super().keys()

    def items(self):  # type: ignore[no-untyped-def]
        _Published.walks += 1
        return super().items()


def test_a_fold_costs_what_it_folds_never_a_walk_over_every_field() -> None:
    published = _Published({f"f{i}": -1 for i in range(1000)})
    first = fold(published, Stack.of([_write(f1=1), _write(f2=2), _write(f3=3)]), 2)
    assert first is not None
    second = fold(first[0], Stack.of([*first[1], _write(f4=4), _write(f1=5)]), 2)
    assert second is not None
    assert _Published.walks == 0  # a schema of any size: the folded values lie over the published ones
    base = second[0]
    assert (base["f1"], base["f2"], base["f3"], base["f4"], base["f9"]) == (1, 2, 3, 4, -1)
    assert [kept.values for kept in second[1]] == [{"f1": 5}]  # the newest stays live, over the folded f1
    assert len(base) == 1000 and "f999" in base


def test_fold_never_folds_a_scope_or_a_write_over_a_kept_one() -> None:
    scope = Write(record=None, values=types.MappingProxyType({"x": 1}), scope=object())  # type: ignore[arg-type]
    over = _write(x=2)  # lies over the scope: folding it would hide the scope's value
    free = _write(y=3)
    folded = fold({"x": 0, "y": 0}, Stack.of([scope, over, free]), 2)
    assert folded is not None
    new_base, kept = folded
    assert list(kept) == [scope, over]
    assert dict(new_base) == {"x": 0, "y": 3}
