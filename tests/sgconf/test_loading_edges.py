"""What a loaded record says about itself: its summary and the chains of records built elsewhere."""

from __future__ import annotations

import pytest

from sgconf import REQUIRED, ConfigError, DeclarationError, Schema, ServerArgs, load, setting
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


def test_a_required_setting_nothing_set_is_a_problem_naming_its_flag_and_variable() -> None:
    schema = Schema("req", env_prefix="REQ_")
    schema.namespace("n")(type("N", (), {"__annotations__": {"f": int}, "f": setting(REQUIRED, help="x")}))
    with pytest.raises(ConfigError) as exc:
        schema.load([], env={})
    assert exc.value.lines() == [
        "$.n.f: 'f' is required and nothing set it -- pass --f, set REQ_F, or put it in a config file"
    ]
    assert schema.load([], env={"REQ_F": "3"}).record.f == 3


def test_the_first_load_freezes_the_schema_it_builds_flags_for() -> None:
    schema = Schema("unfrozen", env_prefix="UNFROZEN_")
    schema.namespace("n")(type("N", (), {"__annotations__": {"f": int}, "f": setting(1, help="x")}))
    assert schema.load(["--f", "2"], env={}).record.f == 2 and schema.frozen
    with pytest.raises(DeclarationError, match="it is frozen"):
        schema.namespace("m")(type("M", (), {"__annotations__": {"g": int}, "g": setting(1, help="x")}))


def test_provenance_names_the_alias_a_flag_was_typed_as() -> None:
    loaded = load(["--max-num-seqs", "8"], env={})
    chain = explain(loaded.record, "max_running_requests", provenance=loaded.provenance)
    assert [o.describe() for o in chain] == ["from defaults", "from --max-num-seqs"]


def test_explain_refuses_what_is_not_a_record() -> None:
    with pytest.raises(TypeError, match=r"^explain\(\) takes a record of an sgconf schema, got dict$"):
        explain({}, "page_size")
