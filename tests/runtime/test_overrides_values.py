"""The override values on their own: sources, redaction, copies, records, proposals, receipts, subscriptions."""

from __future__ import annotations

import types
from typing import Any

import pytest

from runtime.overrides import (
    FieldChange,
    OverrideProposal,
    OverrideReceipt,
    OverrideRecord,
    Subscription,
    detached,
    inner_source,
    iter_changes,
    shown,
)
from sgconf import SERVING


def test_inner_source_strips_every_revert_prefix() -> None:
    """A revert acts for the source under all its `revert:` prefixes."""
    assert [inner_source(s) for s in ("hicache.attach", "revert:hicache.attach", "revert:revert:ops", "revert:")] == [
        "hicache.attach",
        "hicache.attach",
        "ops",
        "",
    ]


def test_shown_redacts_set_secrets_only() -> None:
    """A set secret becomes '***'; an unset one, other fields and unknown names are shown as they are."""
    shown_ = [
        shown(name, value, SERVING)
        for name, value in (("api_key", "k"), ("api_key", None), ("page_size", 16), ("no_such_field", "x"))
    ]
    assert shown_ == ["***", None, 16, "x"]


def test_detached_copies_containers_and_keeps_scalars() -> None:
    """Scalars come back as themselves; containers as deep copies."""
    nested = {"a": [1, 2]}
    copied = detached(nested)
    assert copied == nested and copied is not nested and copied["a"] is not nested["a"]
    text = "s"
    assert detached(text) is text and detached(None) is None and detached(1.5) == 1.5


def test_records_redact_and_find_changes() -> None:
    """A record lists its fields, finds a change by name and renders itself redacted unless asked."""
    changes = (FieldChange("api_key", None, "k", secret=True), FieldChange("page_size", 8, 16))
    rec = OverrideRecord("ops", "override", 3, 12.5, changes)
    assert rec.kind == "set"
    assert rec.fields == ("api_key", "page_size")
    assert rec.change_of("page_size") == FieldChange("page_size", 8, 16)
    assert rec.change_of("tp_size") is None
    assert rec.as_dict() == {
        "source": "ops",
        "layer": "override",
        "generation": 3,
        "time": 12.5,
        "fields": {"api_key": {"old": None, "new": "***"}, "page_size": {"old": 8, "new": 16}},
    }
    assert rec.as_dict(redact=False)["fields"]["api_key"] == {"old": None, "new": "k"}
    other = OverrideRecord("x", "override", 4, 0.0, (FieldChange("page_size", 16, 32),))
    assert list(iter_changes((rec, other), "page_size")) == [(rec, changes[1]), (other, other.changes[0])]
    assert list(iter_changes((rec, other), "api_key")) == [(rec, changes[0])]


class _State:
    snapshot = types.SimpleNamespace(generation=7)


def test_proposal_values_generation_and_repr() -> None:
    """A proposal gives its new values, the generation it was checked against, and names its fields."""
    proposal = OverrideProposal(
        context=None,
        base=_State(),
        source="ops",
        layer="override",
        changes=(FieldChange("page_size", 8, 16), FieldChange("tp_size", 1, 2)),
        snapshot=None,
        flat=types.MappingProxyType({}),
    )
    assert proposal.values == {"page_size": 16, "tp_size": 2}
    assert proposal.base_generation == 7
    assert repr(proposal) == "OverrideProposal(source='ops', base_generation=7, fields=[page_size, tp_size])"


class _Context:
    def __init__(self) -> None:
        self.reverted: list[Any] = []
        self.unsubscribed: list[Any] = []

    def revert(self, receipt: OverrideReceipt, *, owner: Any = None) -> OverrideReceipt:
        self.reverted.append(receipt)
        return receipt

    def _unsubscribe(self, sub: Subscription) -> None:
        self.unsubscribed.append(sub)


def test_receipt_reverts_through_its_context() -> None:
    """A receipt's revert asks its context and returns what it answers; its repr names source, generation, fields."""
    ctx = _Context()
    rec = OverrideRecord("ops", "override", 2, 0.0, (FieldChange("page_size", 8, 16),))
    receipt = OverrideReceipt(ctx, rec, None)
    assert (receipt.source, receipt.generation, receipt.changes, receipt.fields) == (
        "ops",
        2,
        rec.changes,
        ("page_size",),
    )
    assert receipt.revert() is receipt and ctx.reverted == [receipt]
    assert repr(receipt) == "OverrideReceipt(source='ops', generation=2, fields=[page_size], owner='context')"


def test_an_owned_receipt_reverts_through_its_owner_not_its_context() -> None:
    ctx = _Context()
    asked: list[Any] = []

    class Owner:
        owner_name = "engine"

        def revert(self, receipt: OverrideReceipt) -> OverrideReceipt:
            asked.append(receipt)
            return receipt

    rec = OverrideRecord("ops", "override", 2, 0.0, (FieldChange("page_size", 8, 16),), owner="engine")
    receipt = OverrideReceipt(ctx, rec, None, owner=Owner())
    assert receipt.revert() is receipt and asked == [receipt] and ctx.reverted == []
    assert receipt.owner_name == "engine" and repr(receipt).endswith("owner='engine')")
    assert rec == OverrideRecord(
        "ops", "override", 2, 0.0, (FieldChange("page_size", 8, 16),)
    )  # the owner is not compared


def test_subscription_wants_and_unsubscribes() -> None:
    """No fields means every change; otherwise any overlap; leaving the `with` block unsubscribes."""
    ctx = _Context()
    assert Subscription(ctx, print, None).wants(("page_size",))
    some = Subscription(ctx, print, frozenset({"page_size", "tp_size"}))
    assert some.wants(("tp_size", "dp_size")) and not some.wants(("dp_size",)) and not some.wants(())
    with some as entered:
        assert entered is some and ctx.unsubscribed == []
    assert ctx.unsubscribed == [some]


def test_record_kind_is_keyword_only_and_subscription_repr_hides_its_context() -> None:
    """`kind` cannot be passed by position; a subscription's repr leaves the context out."""
    with pytest.raises(TypeError):
        OverrideRecord("ops", "override", 1, 0.0, (), "remove")  # type: ignore[misc]
    assert OverrideRecord("ops", "override", 1, 0.0, (), kind="remove").kind == "remove"
    assert (
        repr(Subscription(_Context(), print, None)) == "Subscription(callback=<built-in function print>, fields=None)"
    )


def test_a_change_of_a_secret_is_redacted_in_its_repr_and_equal_whatever_its_flag() -> None:
    """`repr` shows `***` for a set secret; the secret flag is metadata, not part of equality."""
    change = FieldChange("api_key", None, "k3y", secret=True)
    assert repr(change) == "FieldChange(name='api_key', old=None, new='***')"
    assert repr(FieldChange("page_size", 8, 16)) == "FieldChange(name='page_size', old=8, new=16)"
    assert change == FieldChange("api_key", None, "k3y")
    with pytest.raises(TypeError):
        FieldChange("api_key", None, "k3y", True)  # type: ignore[misc]  # the flag is keyword-only
