"""The JSON Schema (sgconf.json_schema) of all fields: valid draft 2020-12, and it accepts what `show` and config files hold."""

from __future__ import annotations

import json

import jsonschema
import pytest

from sgconf import Schema, config_schema, load, nested, record_to_dict, resolve_once, setting
from sgconf.serving import SERVING, fields, main


def test_schema_is_valid_draft_2020_12() -> None:
    """The schema itself passes the 2020-12 metaschema."""
    schema = config_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    assert list(schema["properties"]) == SERVING.top_level_namespaces()


def test_field_entries_carry_types_enums_defaults_and_bounds() -> None:
    """Each field says its type (nullable where optional), enum, default, description and bounds."""
    props = config_schema()["properties"]
    page = props["schedule"]["properties"]["page_size"]
    assert page == {
        "description": "tokens per KV page; default 1",
        "type": ["integer", "null"],
        "default": None,
        "x-flag": "--page-size",
        "x-env": "SGCONF_PAGE_SIZE",
        "x-apply": "restart",
    }
    policy = props["schedule"]["properties"]["schedule_policy"]
    assert policy["enum"] == ["fcfs", "lpm", "random", "dfs-weight"] and policy["default"] == "fcfs"
    assert policy["x-hot"] is True and policy["x-apply"] == "step"
    backend = props["memory"]["properties"]["hicache_storage_backend"]
    assert backend["x-apply"] == "drain" and "x-hot" not in backend
    assert backend["enum"] == ["file", "memory", None]
    mem = props["schedule"]["properties"]["mem_fraction_static"]
    assert (mem["exclusiveMinimum"], mem["exclusiveMaximum"]) == (0, 1)
    assert props["serving"]["properties"]["port"]["maximum"] == 65535
    assert props["serving"]["properties"]["api_key"]["writeOnly"] is True
    assert props["exec"]["properties"]["kernel"]["properties"]["attention_backend"]["type"] == ["string", "null"]
    leaves = sum(len(ns["properties"]) for ns in props.values() if "kernel" not in ns["properties"])
    leaves += sum(len(sub["properties"]) for sub in props["exec"]["properties"].values())
    assert leaves == len(fields())


def test_show_json_dump_validates(capsys: pytest.CaptureFixture[str]) -> None:
    """The JSON of `sgconf show --format json` validates against `sgconf schema`."""
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert (
        main(
            [
                "show",
                "--format",
                "json",
                "--speculative-algorithm",
                "EAGLE",
                "--api-key",
                "k",
                "--enable-hierarchical-cache",
                "--hicache-storage-backend-extra-config",
                '{"dir": "/x"}',
            ]
        )
        == 0
    )
    dump = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator(schema).validate(dump)


def test_defaults_and_bad_dumps() -> None:
    """Unresolved defaults validate; a wrong type, a bad choice or an unknown key does not."""
    validator = jsonschema.Draft202012Validator(config_schema())
    values = record_to_dict(load(env={}).record)
    validator.validate(nested(values, redact=False))
    resolved = nested(record_to_dict(resolve_once(load(env={}).record).values))
    validator.validate(resolved)
    for path, bad in (
        (("schedule", "page_size"), "16"),
        (("schedule", "schedule_policy"), "lifo"),
        (("schedule", "page_sise"), 16),
        (("parallel", "tp_size"), 0),
    ):
        doc = json.loads(json.dumps(resolved))
        doc[path[0]][path[1]] = bad
        assert not validator.is_valid(doc), path


def test_a_secret_default_is_left_out_and_the_field_stays_write_only() -> None:
    """A secret's set default never reaches the schema (it cannot print `***` for it); an unset one still says null."""
    schema = Schema("secretdoc", env_prefix="SECRETDOC_")

    @schema.namespace("auth")
    class AuthConfig:
        signing: str = setting("default-signing-key", help="the signing key", secret=True)
        token: str | None = setting(None, help="the token", secret=True)

    props = schema.json_schema()["properties"]["auth"]["properties"]
    assert "default" not in props["signing"] and props["signing"]["writeOnly"] is True
    assert props["token"]["default"] is None and props["token"]["writeOnly"] is True
    assert "default-signing-key" not in json.dumps(schema.json_schema())
