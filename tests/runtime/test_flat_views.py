"""Flat views, the summed fingerprint, generated bag copies and the rule index: what makes an override cost what it touches."""

from __future__ import annotations

import weakref

import attrs
import pytest

from runtime import create_context
from runtime.fingerprint import Fingerprint, _term, counted, fingerprint_of
from runtime.flatview import FlatView, Overlay, getters_of
from sgconf import Rule, Schema, setting
from sgconf.rules import check_rules
from sgconf.twin import replaced


def _schema(rules: tuple[Rule, ...] = ()) -> Schema:
    schema = Schema("flatrt", env_prefix="FLATRT_", rules=rules)

    @schema.namespace("pool")
    class PoolConfig:
        size: int = setting(4, help="slots", hot=True)
        ratio: float = setting(0.5, help="share", hot=True)
        tags: list[int] = setting(factory=lambda: [1, 2], help="tags", hot=True)
        token: str = setting("t", help="key", secret=True, hot=True)

    @schema.namespace("exec.kernel")
    class KernelConfig:
        backend: str = setting("ref", help="backend", hot=True)

    @schema.namespace("exec.graph")
    class GraphConfig:
        depth: int = setting(2, help="depth", hot=True)

    return schema.freeze()


def test_a_flat_view_reads_every_leaf_of_its_snapshot_and_holds_none() -> None:
    schema = _schema()
    ctx = create_context(schema.record(), role="test")
    snap = ctx.snapshot()
    view = FlatView(snap, getters_of(schema))
    assert dict(view) == snap.flat() == view.copy()
    assert len(view) == len(schema.fields()) and list(view) == list(schema.fields())
    assert view["backend"] == "ref" and view["depth"] == 2 and view["tags"] == (1, 2)
    assert "depth" in view and "nope" not in view
    with pytest.raises(KeyError):
        view["nope"]
    assert "generation=0" in repr(view) and "fields=6" in repr(view)
    assert getters_of(schema) is getters_of(schema)  # one table per schema


def test_an_overlay_shows_the_change_over_what_lies_under() -> None:
    under = {"a": 1, "b": 2}
    over = Overlay({"b": 3}, under)
    assert over["a"] == 1 and over["b"] == 3 and dict(over) == {"a": 1, "b": 3}
    assert len(over) == 2 and "a" in over and "b" in over and "c" not in over
    assert under == {"a": 1, "b": 2}  # nothing copied into, nothing changed
    with pytest.raises(KeyError):
        over["c"]


def test_the_summed_fingerprint_follows_every_commit_and_equals_a_fresh_one() -> None:
    schema = _schema()
    ctx = create_context(schema.record(), role="test")
    first = ctx.fingerprint()
    assert first == ctx.snapshot().fingerprint() == fingerprint_of(ctx.snapshot().flat(), schema)
    receipt = ctx.override("t", size=8, tags=[3], backend="fast", depth=5)
    moved = ctx.fingerprint()
    assert moved != first and moved == ctx.snapshot().fingerprint()
    with ctx.scoped(ratio=0.25):
        assert ctx.fingerprint() == ctx.snapshot().fingerprint() not in (first, moved)
    assert ctx.fingerprint() == moved
    receipt.revert()
    assert ctx.fingerprint() == first
    # an equal value of another type (2.0 for 2) is the same config, so the same fingerprint
    ctx.override("t", depth=2.0)
    assert ctx.fingerprint() == first


def test_the_fingerprint_counts_what_it_declares_and_a_default_costs_its_own_term() -> None:
    schema = _schema()
    record = schema.record()
    flat = {name: getattr(record, name) for name in schema.fields()}
    assert counted(schema) == frozenset(schema.fields()) - {"token"}  # secrets do not count
    by_hand = sum(_term(name, flat[name]) for name in counted(schema)) % (1 << 256)
    assert Fingerprint.of(flat, schema).total == by_hand
    assert Fingerprint.of({**flat, "token": "other"}, schema).digest == Fingerprint.of(flat, schema).digest
    changed = {**flat, "size": 5}
    assert Fingerprint.of(changed, schema).total == (by_hand - _term("size", 4) + _term("size", 5)) % (1 << 256)
    assert len(Fingerprint.of(flat, schema).digest) == 64


def test_a_generated_copy_keeps_every_other_field_and_sets_the_changed_ones() -> None:
    @attrs.frozen(slots=True)
    class Bag:
        a: int
        b: str
        c: tuple[int, ...]

    @attrs.frozen(slots=True)
    class Wider(Bag):
        d: float = 1.0

    bag = Bag(1, "x", (1,))
    new = replaced(bag, {"b": "y"})
    assert new == Bag(1, "y", (1,)) and bag == Bag(1, "x", (1,)) and type(new) is Bag
    wide = replaced(Wider(1, "x", (2,), 3.0), {"a": 9, "d": 4.0})
    assert wide == Wider(9, "x", (2,), 4.0) and type(wide) is Wider  # a subclass gets its own copy, with its own fields
    assert replaced(bag, {}) == bag and replaced(bag, {}) is not bag


def test_a_generated_copy_is_frozen_and_of_the_class_itself_for_every_layout() -> None:
    @attrs.frozen(slots=True, weakref_slot=True)
    class Slotted:
        a: int
        b: list[int]

    @attrs.frozen(slots=False)
    class WithDict:
        a: int
        b: str = "x"

    for bag, change in ((Slotted(1, [2]), {"a": 5}), (WithDict(1), {"b": "y"})):
        new = replaced(bag, change)
        assert type(new) is type(bag) and new == attrs.evolve(bag, **change)
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            new.a = 7  # type: ignore[misc]
        assert new.a == (5 if isinstance(bag, Slotted) else 1)
    weakref.ref(replaced(Slotted(1, [2]), {}))  # the class's own weakref slot is there
    assert replaced(Slotted(1, [2]), {"b": [3]}).b == [3]


def test_an_override_rechecks_only_the_rules_that_read_what_it_touched_in_declaration_order() -> None:
    seen: list[str] = []

    def judged(name: str, message: str | None):
        def check(values):
            seen.append(name)
            return message

        return check

    rules = (
        Rule("graph_b", ("depth",), judged("graph_b", "depth is wrong")),
        Rule("pool_a", ("size", "ratio"), judged("pool_a", None)),
        Rule("launch", ("depth",), judged("launch", "never after publish"), launch_only=True),
        Rule("graph_a", ("backend", "depth"), judged("graph_a", "backend and depth disagree")),
    )
    schema = _schema(rules)
    record = schema.record()
    values = {name: getattr(record, name) for name in schema.fields()}
    problems = check_rules(values, {"depth": "from here"}, only_touching={"depth"}, schema=schema)
    assert seen == ["graph_b", "graph_a"]  # neither the pool rule nor the launch-only one ran
    assert [p.message for p in problems] == ["depth is wrong", "backend and depth disagree"]
    assert problems[0].source == "from here"
    seen.clear()
    assert check_rules(values, only_touching={"ratio", "tags"}, schema=schema) == [] and seen == ["pool_a"]
    seen.clear()
    check_rules(values, schema=schema)  # a full check runs them all, launch-only included
    assert seen == ["graph_b", "pool_a", "launch", "graph_a"]


class _Opaque:
    def __repr__(self) -> str:
        return "<opaque>"


def test_every_leaf_has_one_written_form_per_equality_class() -> None:
    from runtime.fingerprint import fragment

    assert fragment("a", True) == fragment("a", 1) == '["a",1]'
    assert fragment("a", None) == '["a",null]' and fragment("a", 'q"\u00e9') == '["a","q\\"\\u00e9"]'
    assert fragment("a", 2.0) == fragment("a", 2) == '["a",2]' and fragment("a", 2.5) == '["a","2.5"]'
    mixed = [None, "s", True, 3, 2.0, 0.25, {"k": (1, 2), 7: None}, {3, 1}, _Opaque()]
    assert (
        fragment("m", mixed)
        == fragment("m", tuple(mixed))
        == ('["m",[null,"s",1,3,2,"0.25",{"{}":[["7",null],["k",[1,2]]]},{"set":["1","3"]},{"repr":"<opaque>"}]]')
    )


def test_a_commit_moves_the_sum_modulo_2_to_the_256() -> None:
    from runtime.overrides import FieldChange

    mod = 1 << 256
    up = next(v for v in range(100) if _term("a", v + 1) > _term("a", v))
    down = next(v for v in range(100) if _term("a", v + 1) < _term("a", v))
    top = Fingerprint(mod - 1, frozenset({"a"}))
    moved = top.changed([FieldChange("a", up, up + 1)])
    assert moved.total == (mod - 1 + _term("a", up + 1) - _term("a", up)) % mod < mod
    bottom = Fingerprint(0, frozenset({"a"}))
    assert bottom.changed([FieldChange("a", down, down + 1)]).total == (_term("a", down + 1) - _term("a", down)) % mod
    assert len(moved.digest) == 64 and int(moved.digest, 16) == moved.total
    # a field that does not count, or a change to the very same object, leaves it as it is
    assert top.changed([FieldChange("b", 1, 2)]) is top and top.changed([FieldChange("a", up, up)]) is top
    assert "frozenset" not in repr(top)


def test_a_field_at_its_default_costs_no_hashing(monkeypatch: pytest.MonkeyPatch) -> None:
    import runtime.fingerprint as fp

    schema = _schema()
    assert fp.counted(schema) is fp.counted(schema)
    assert fp._default_terms(schema) is fp._default_terms(schema)
    assert set(fp._default_terms(schema)) == fp.counted(schema)
    record = schema.record()
    flat = {name: getattr(record, name) for name in schema.fields()}
    expected = Fingerprint.of(flat, schema).total
    calls: list[str] = []
    real = fp._term
    monkeypatch.setattr(fp, "_term", lambda name, value: calls.append(name) or real(name, value))
    assert Fingerprint.of(flat, schema).total == expected and calls == []
    # an equal scalar that is another object is still the default; another value is hashed, alone
    equal = {**flat, "backend": "".join(["r", "ef"]), "depth": 2.0}
    assert Fingerprint.of(equal, schema).total == expected and calls == []
    assert Fingerprint.of({**flat, "size": 5}, schema).total != expected and calls == ["size"]
