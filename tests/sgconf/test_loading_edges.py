"""What a loaded record says about itself: its summary and the chains of records built elsewhere."""

from __future__ import annotations

from sgconf import ServerArgs, load
from sgconf.loading import explain
from sgconf.provenance import Origin


def test_repr_counts_the_fields_set_by_a_layer() -> None:
    """`fields_set` counts fields whose chain goes past the default, however many layers set them."""
    loaded = load(["--page-size", "16"], env={"SGCONF_PAGE_SIZE": "8", "SGCONF_TP_SIZE": "2"})
    assert repr(loaded) == f"Loaded(record={loaded.record!r}, config_file=None, fields_set=2)"
    assert repr(load(env={})).endswith("fields_set=0)")


def test_explain_a_record_built_without_load() -> None:
    """Without provenance the chain is the default, then the record's own value when it differs."""
    assert explain(ServerArgs(page_size=4), "page_size") == (
        Origin("default", "defaults", None),
        Origin("record", "given", 4),
    )
    assert explain(ServerArgs(), "page_size") == (Origin("default", "defaults", None),)


def test_explain_prefers_the_provenance_it_is_given() -> None:
    """A provenance passed in wins over the record's (and over none)."""
    loaded = load(["--page-size", "16"], env={"SGCONF_PAGE_SIZE": "8"})
    chain = explain(ServerArgs(page_size=4), "page_size", provenance=loaded.provenance)
    assert [o.layer for o in chain] == ["default", "env", "cli"]
    other = load(env={})
    assert explain(loaded.record, "page_size", provenance=other.provenance) == (Origin("default", "defaults", None),)
