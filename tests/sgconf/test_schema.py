"""`sgconf.Schema`: a runtime's own namespaces, prefix, record, CLI and JSON Schema, and copies of the serving one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import sgconf
from sgconf import ConfigError, DeclarationError, Schema, setting


class Size(int):
    """A byte count that a schema's own converter hook parses from `4k`."""


def test_load_from_file_env_and_flags_with_provenance(myrt: Schema, tmp_path: Path) -> None:
    """A TOML file, MYRT_* env and flags layer in order; SGCONF_* variables are not this schema's business."""
    cfg = tmp_path / "myrt.toml"
    cfg.write_text('[lora]\nmax_loras = 2\n[cache]\npolicy = "lfu"\n')
    env = {"MYRT_CONFIG": str(cfg), "MYRT_MAX_LORAS": "6", "SGCONF_PAGE_SIZE": "x", "MYRT_LORA_PATHS": "a,b"}
    loaded = myrt.load(["--port", "9000"], env=env)
    record = loaded.record
    assert type(record) is myrt.record and sgconf.schema_of(record) is myrt
    assert (record.max_loras, record.policy, record.port, record.page_size) == (6, "lfu", 9000, 16)
    assert record.lora_paths == ("a", "b")
    assert [o.describe() for o in loaded.chain("max_loras")] == [
        "from defaults",
        f"from {cfg}",
        "from env MYRT_MAX_LORAS",
    ]
    assert loaded.winner("port").describe() == "from --port"


def test_bad_input_names_field_value_and_source(myrt: Schema) -> None:
    """Every problem is reported at once with its path and this schema's env names; did-you-mean uses its names."""
    with pytest.raises(ConfigError) as info:
        myrt.load(["--max-loras", "0"], env={"MYRT_PAGESIZE": "8"})
    assert info.value.lines() == [
        "$.pagesize: unknown environment variable 'MYRT_PAGESIZE' -- did you mean 'MYRT_PAGE_SIZE'? (from env MYRT_PAGESIZE)",
        "$.lora.max_loras: must be > 0, got 0 (from --max-loras)",
    ]


def test_json_schema_and_help_name_only_its_fields(myrt: Schema, capsys: pytest.CaptureFixture[str]) -> None:
    """`schema` and `show --help` of the schema's CLI name its fields, its prefix and its program only."""
    doc = myrt.json_schema()
    assert doc["title"] == "myrt configuration"
    assert list(doc["properties"]) == ["lora", "cache", "api"]
    assert doc["properties"]["lora"]["properties"]["max_loras"]["x-env"] == "MYRT_MAX_LORAS"
    assert myrt.main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == doc
    assert myrt.main(["show", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: myrt show [options]")
    assert "lora settings:" in out and "--max-loras INT" in out and "env MYRT_<FIELD>" in out
    assert "SGCONF" not in out and "--tp-size" not in out and "hicache" not in out


def test_show_prints_the_schema_values(myrt: Schema, capsys: pytest.CaptureFixture[str]) -> None:
    """`show --format json` of the schema's CLI nests its values and redacts its secrets."""
    assert myrt.main(["show", "--format", "json", "--token", "k", "--max-loras", "2"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["lora"] == {"max_loras": 2, "lora_paths": []} and data["api"]["token"] == "***"


def test_declaring_after_freeze_is_an_error(myrt: Schema) -> None:
    """A frozen schema refuses new namespaces and extensions with the fix."""
    with pytest.raises(DeclarationError, match="cannot declare namespace 'late' in schema 'myrt': it is frozen"):

        @myrt.namespace("late")
        class Late:
            x: int = setting(1, help="x")


def test_a_name_clash_names_both_owners() -> None:
    """Two namespaces of one schema may not declare the same field name."""
    schema = Schema("clash")

    @schema.namespace("a")
    class AConfig:
        port: int = setting(1, help="p")

    with pytest.raises(DeclarationError) as info:

        @schema.namespace("b")
        class BConfig:
            port: int = setting(2, help="p")

    assert str(info.value) == (
        "field 'port' is declared in both AConfig and BConfig of schema 'clash' -- "
        "field names are routed flat and must be unique across namespaces"
    )


def test_two_schemas_may_share_field_names(myrt: Schema) -> None:
    """`page_size` and `port` are the serving schema's and myrt's, each with its own type and default."""
    assert myrt.field_info("port").default == 8000 and sgconf.field_info("port").default == 30000
    assert myrt.field_info("page_size").namespace == "cache"


def test_copy_refuses_unknown_names() -> None:
    """Leaving out or re-defaulting what the schema does not have is a declaration error naming it."""
    with pytest.raises(DeclarationError, match="cannot leave out namespace\\(s\\) 'lora'"):
        sgconf.SERVING.copy("x", without=["lora"])
    with pytest.raises(DeclarationError, match="unknown field 'prot' -- did you mean 'port'"):
        sgconf.SERVING.copy("x", defaults={"prot": 1})


def test_extend_needs_an_existing_namespace() -> None:
    """Extending a namespace the schema lacks says how to declare it."""
    schema = Schema("ext")
    with pytest.raises(DeclarationError, match="use @schema.namespace\\('lora'\\)|declare it with @schema.namespace"):

        @schema.extend("lora")
        class More:
            x: int = setting(1, help="x")


def test_schema_converter_takes_extra_hooks() -> None:
    """A hook registered on one schema's converter changes that schema only."""
    schema = Schema("hooks")

    @schema.namespace("mem")
    class Mem:
        budget: Size = setting(Size(1), help="bytes")

    schema.converter.register_structure_hook(Size, lambda v, _: Size(int(str(v).rstrip("k")) * 1000))
    assert schema.load(["--budget", "4k"], env={}).record.budget == 4000


def test_derived_values_declare_the_namespaces_they_read() -> None:
    """A derived value is a typed `Derived`: its namespaces are checked at freeze and decide what a copy keeps."""
    schema = Schema("drv")

    @schema.namespace("sizes")
    class Sizes:
        pages: int = setting(4, help="pages")

    @schema.namespace("extra")
    class Extra:
        bonus: int = setting(1, help="bonus")

    @schema.derived("total", namespaces=["sizes", "extra"])
    def total(view: object) -> int:
        """Pages plus bonus."""
        return 0

    schema.derived("pages_only", namespaces=["sizes"])(lambda view: 0)
    copy = schema.copy("drv2", without=["extra"])
    assert list(copy.derived_values()) == ["pages_only"]
    assert schema.derived_values()["total"] == sgconf.Derived("total", ("sizes", "extra"), total)
    assert schema.derived_values()["total"].doc == "Pages plus bonus."
    with pytest.raises(DeclarationError, match="derived value 'total' is declared twice in schema 'drv'"):
        schema.derived("total", namespaces=["sizes"])(lambda view: 1)
    schema.freeze()

    typo = Schema("typo")
    typo.namespace("sizes")(type("Sizes", (), {"__annotations__": {"pages": "int"}, "pages": setting(4, help="p")}))
    typo.derived("total", namespaces=["size"])(lambda view: 0)
    with pytest.raises(DeclarationError, match="derived value 'total' of schema 'typo' reads namespace 'size'"):
        typo.freeze()
