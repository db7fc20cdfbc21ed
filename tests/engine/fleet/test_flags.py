"""The serve flags of a fleet member: defaults, and bad ones refused before anything starts."""

from __future__ import annotations

import pytest

from engine.fleet.flags import fleet_options
from engine.serve import serve_parser
from sgconf.errors import ConfigError


class Serving:
    port = 30001


def options(*argv: str):  # type: ignore[no-untyped-def]
    return fleet_options(serve_parser().parse_args(list(argv)), Serving())


def test_no_fleet_flag_is_no_fleet_and_defaults_fill_the_rest() -> None:
    assert options() is None
    got = options("--fleet", "prod")
    assert (got.name, got.store, got.connect_timeout_s) == ("prod", "etcd://127.0.0.1:2379", 10.0)
    assert got.server_id.endswith(":30001")


def test_bad_fleet_flags_are_listed_together() -> None:
    with pytest.raises(ConfigError) as err:
        options("--fleet", "no/slash", "--fleet-store", "http://x:1", "--fleet-connect-timeout-s", "-1")
    assert err.value.lines() == [
        "$.fleet: fleet name 'no/slash' (--fleet) is not usable as a store key -- use 1 to 63 letters, digits, '.', '_'"
        " or '-', starting with a letter or digit (from --fleet)",
        "$.fleet_store: --fleet-store must be etcd://host:port (got 'http://x:1') -- e.g. etcd://127.0.0.1:2379"
        " (from --fleet-store)",
        "$.fleet_connect_timeout_s: must be between 0 and 3600 seconds (got -1.0) (from --fleet-connect-timeout-s)",
    ]


def test_a_store_without_a_fleet_is_refused() -> None:
    with pytest.raises(ConfigError, match="--fleet-store needs --fleet NAME -- add --fleet, or drop --fleet-store"):
        options("--fleet-store", "etcd://127.0.0.1:2379")
