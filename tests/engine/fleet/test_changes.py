"""Operator input to desired fields: typed values, secrets as references, refusals naming field, value and fix."""

from __future__ import annotations

import pytest

from engine.fleet.changes import ATTACH_PATH_FIELDS, describe, merged, parse_assignments
from engine.http.bodies import attach_fields
from sgconf.errors import ConfigError


def test_values_are_typed_by_their_field() -> None:
    """Strings from the command line become the field's JSON type, with the shared converter."""
    got = parse_assignments(
        [
            "schedule_policy=LPM",
            "schedule_conservativeness=0.5",
            "max-running-requests=32",
            "log_requests=yes",
            'hicache_storage_backend_extra_config={"dir": "/tmp/x"}',
            "hicache_storage_backend=file",
        ]
    )
    assert got == {
        "schedule_policy": "lpm",
        "schedule_conservativeness": 0.5,
        "max_running_requests": 32,
        "log_requests": True,
        "hicache_storage_backend_extra_config": {"dir": "/tmp/x"},
        "hicache_storage_backend": "file",
    }


def test_every_bad_word_is_listed_and_nothing_is_returned() -> None:
    """Unknown fields, bad values, restart-only fields and words without '=' are refused together."""
    with pytest.raises(ConfigError) as err:
        parse_assignments(["schedule_polcy=lpm", "max_running_requests=many", "page_size=16", "stream_interval"])
    assert err.value.lines() == [
        "$.schedule_polcy: unknown field 'schedule_polcy' -- did you mean 'schedule_policy'?",
        "$.schedule.max_running_requests: 'max_running_requests': expected an integer (got 'many') (from sgconf fleet set)",
        "$.schedule.page_size: 'page_size' cannot change while a server runs (apply mode restart) -- restart the servers"
        " with --page-size (from sgconf fleet set)",
        "$: expected FIELD=VALUE, got 'stream_interval' -- e.g. schedule_policy=lpm (from sgconf fleet set)",
    ]
    assert err.value.header == "fleet change refused, nothing written"


def test_a_secret_is_refused_in_clear_and_values_may_be_references() -> None:
    """A secret's clear value never reaches the store, nor the error; any value may be @env:VAR or @file:PATH."""
    with pytest.raises(ConfigError) as err:
        parse_assignments(["admin_api_key=hunter2-hunter2"])
    assert "hunter2" not in str(err.value)
    assert "'admin_api_key' is a secret and the fleet store would keep it in clear (got '***')" in str(err.value)
    got = parse_assignments(
        [
            "hicache_storage_backend=file",
            "hicache_storage_backend_extra_config=@file:/run/secrets/kv.json",
            "log_level=@env:FLEET_LOG_LEVEL",
        ]
    )
    assert got == {
        "hicache_storage_backend": "file",
        "hicache_storage_backend_extra_config": {"secret_ref": "file:/run/secrets/kv.json"},
        "log_level": {"secret_ref": "env:FLEET_LOG_LEVEL"},
    }
    assert describe(got) == (
        "hicache_storage_backend='file', hicache_storage_backend_extra_config=@file:/run/secrets/kv.json,"
        " log_level=@env:FLEET_LOG_LEVEL"
    )


def test_merge_puts_new_values_on_top_and_unset_drops_fields() -> None:
    assert merged({"schedule_policy": "lpm", "stream_interval": 2}, {"stream_interval": 4}, ["schedule_policy"]) == {
        "stream_interval": 4
    }
    with pytest.raises(ConfigError, match=r"'log_level' is not in the desired config \(it holds: stream_interval\)"):
        merged({"stream_interval": 2}, {}, ["log_level"])


def test_storage_settings_need_a_backend_alongside() -> None:
    """A write policy alone is no attach: refused, naming the field that is missing."""
    with pytest.raises(
        ConfigError, match="'hicache_write_policy' is applied by a storage attach -- set hicache_storage_backend"
    ):
        merged({}, parse_assignments(["hicache_write_policy=write_back"]), [])
    assert merged({}, parse_assignments(["hicache_write_policy=write_back", "hicache_storage_backend=memory"]), [])


def test_the_attach_path_fields_are_what_an_attach_takes() -> None:
    """The fleet sends exactly the fields the HTTP attach route builds to `backend.attach`."""
    body = {
        "hicache_storage_backend": "file",
        "hicache_storage_backend_extra_config_json": "{}",
        "hicache_storage_prefetch_policy": "best_effort",
        "hicache_write_policy": "write_back",
    }
    assert set(attach_fields(body)) == set(ATTACH_PATH_FIELDS)
