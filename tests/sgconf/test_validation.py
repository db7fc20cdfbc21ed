"""Field conversion and `build_record`: every problem collected, secrets redacted, cross-field rules applied."""

from __future__ import annotations

import functools as _functools

import pytest

from runtime import publish, reset
from sgconf import SERVING as _SERVING
from sgconf import ConfigError, Schema, ServerArgs, setting
from sgconf.errors import Problem
from sgconf.serving import field_info
from sgconf.validation import build_record as _build_record
from sgconf.validation import convert_fields as _convert_fields
from sgconf.validation import shown

build_record = _functools.partial(_build_record, schema=_SERVING)
convert_fields = _functools.partial(_convert_fields, schema=_SERVING)


def test_convert_fields_structures_every_value() -> None:
    """Strings from env or HTTP become typed values; nothing is reported for good input."""
    values, problems = convert_fields({"page_size": "16", "tp_size": 2, "disable_radix_cache": "true"})
    assert (values, problems) == ({"page_size": 16, "tp_size": 2, "disable_radix_cache": True}, [])


def test_convert_fields_collects_every_problem_in_order_with_sources() -> None:
    """Conversion errors, failed checks and unknown names are all reported, each with its own source."""
    values, problems = convert_fields(
        {"tp_size": "x", "page_size": "12", "tp_sise": 2, "dp_size": 2},
        {"tp_size": "from --tp-size", "page_size": "from env SGCONF_PAGE_SIZE", "tp_sise": "from app.toml"},
    )
    assert values == {"dp_size": 2}
    assert problems == [
        Problem("$.parallel.tp_size", "expected an integer, got 'x'", "from --tp-size"),
        Problem("$.schedule.page_size", "must be a power of two, got 12", "from env SGCONF_PAGE_SIZE"),
        Problem("$.tp_sise", "unknown field 'tp_sise' -- did you mean 'tp_size'?", "from app.toml"),
    ]


def test_secrets_are_redacted_in_problems() -> None:
    """A secret's bad value never appears in a message; other values appear as their repr."""
    _, problems = convert_fields({"api_key": 5})
    assert problems == [Problem("$.serving.api_key", "expected a string or null, got '***'", None)]
    assert shown(field_info("api_key"), "k1") == "'***'"
    assert shown(field_info("api_key"), None) == "None"
    assert shown(field_info("page_size"), 12) == "12"


def _secret_mapping_schema() -> Schema:
    schema = Schema("secretmap", env_prefix="SECRETMAP_")

    @schema.namespace("auth")
    class AuthConfig:
        creds: dict[str, int] | None = setting(None, help="credentials by name", secret=True, hot=True)
        keys: list[int] | None = setting(None, help="key ids", secret=True)
        limits: dict[str, int] | None = setting(None, help="a plain mapping")

    return schema.freeze()  # type: ignore[return-value]


def test_a_secret_containers_conversion_problem_names_no_key_and_no_item() -> None:
    """A failing item of a secret dict or list is said by its expected type only; a plain field still names it."""
    schema = _secret_mapping_schema()
    with pytest.raises(ConfigError) as launch:
        schema.load(
            [],
            env={
                "SECRETMAP_CREDS": '{"sekkey": "sekvalue"}',
                "SECRETMAP_KEYS": '[1, "sekitem"]',
                "SECRETMAP_LIMITS": '{"plainkey": "x"}',
            },
        )
    assert launch.value.lines() == [
        "$.auth.creds: expected a JSON object or null (an item is not an integer), got '***' (from env SECRETMAP_CREDS)",
        "$.auth.keys: expected a list or null (an item is not an integer), got '***' (from env SECRETMAP_KEYS)",
        "$.auth.limits: item 'plainkey': expected an integer, got '{\"plainkey\": \"x\"}' (from env SECRETMAP_LIMITS)",
    ]
    with pytest.raises(ConfigError) as key:
        schema.build(creds={1: 2})  # a key that is not a string: refused without naming it
    assert str(key.value).splitlines()[1:] == [
        "  $.auth.creds: expected a JSON object or null, got '***' (from secretmap build())"
    ]
    ctx = publish(schema.build(), role="test")
    try:
        with pytest.raises(ConfigError) as override:
            ctx.override("ops", creds={"sekkey": {"deeper": 1}})
    finally:
        reset()
    assert "sekkey" not in str(override.value) and "deeper" not in str(override.value)
    assert "(an item is not an integer), got '***'" in str(override.value)


def test_build_record_from_defaults_and_on_a_base() -> None:
    """Raw values go on top of the defaults, or of `base` when given (its other values kept)."""
    record = build_record({"page_size": "16"})
    assert record == ServerArgs(page_size=16)
    base = ServerArgs(tp_size=4, page_size=8)
    assert build_record({"page_size": 32}, base=base) == ServerArgs(tp_size=4, page_size=32)
    assert base.page_size == 8


def test_build_record_applies_the_cross_field_rules() -> None:
    """A record whose fields are fine one by one but break a rule is refused, naming the flags and sources."""
    with pytest.raises(ConfigError) as info:
        build_record({"nnodes": 2}, {"nnodes": "from --nnodes"})
    assert info.value.lines() == [
        "$.parallel.nnodes: --nnodes 2 needs --dist-init-addr -- give the rank-0 host:port (from --nnodes)"
    ]
    # the rule sees the base's values too
    with pytest.raises(ConfigError, match="must be divisible by --dp-size 3"):
        build_record({"dp_size": 3}, base=ServerArgs(enable_dp_attention=True, tp_size=4))
    assert build_record({"nnodes": 2, "dist_init_addr": "h:1"}).nnodes == 2


def test_build_record_reports_field_problems_without_judging_rules_on_them() -> None:
    """Every bad field is listed; rules are not run on a half-converted record."""
    with pytest.raises(ConfigError) as info:
        build_record({"nnodes": 2, "page_size": 12, "tp_size": "x"})
    assert info.value.lines() == [
        "$.schedule.page_size: must be a power of two, got 12",
        "$.parallel.tp_size: expected an integer, got 'x'",
    ]
    assert info.value.header == "invalid configuration: 2 problems"


def _small_schema(name: str) -> object:
    from sgconf import REQUIRED, Schema, setting

    schema = Schema(name, env_prefix=name.upper() + "_")

    @schema.namespace("core")
    class Core:
        token: str = setting(REQUIRED, help="a required setting")
        level: int = setting(1, help="a plain setting")

    return schema.freeze()


def test_build_record_names_the_schema_it_builds_and_refuses_a_foreign_base() -> None:
    """No schema and no base is refused; a base gives its schema; a base of another schema is refused by name."""
    one, other = _small_schema("onert"), _small_schema("otherrt")
    with pytest.raises(TypeError, match=r"needs schema= or a base record"):
        _build_record({"level": 2})
    base = _build_record({"token": "t"}, schema=one)
    again = _build_record({"level": 3}, base=base)
    assert (type(again), again.token, again.level) == (one.record, "t", 3)
    with pytest.raises(TypeError, match="base is a record of schema 'onert', not 'otherrt'"):
        _build_record({"level": 3}, base=base, schema=other)
    with pytest.raises(TypeError, match="base must be a record of an sgconf schema, got dict"):
        _build_record({}, base={"level": 1}, schema=one)


def test_a_required_setting_left_unset_is_one_problem_naming_how_to_set_it() -> None:
    schema = _small_schema("needrt")
    with pytest.raises(ConfigError) as info:
        _build_record({"level": 2}, schema=schema)
    assert info.value.lines() == [
        "$.core.token: 'token' is required and nothing set it -- pass --token, set NEEDRT_TOKEN, or put it in a config file"
    ]
