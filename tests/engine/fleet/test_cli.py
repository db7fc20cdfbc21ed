"""`sgconf fleet` against a real etcd: versions, compare-and-swap, rollback, history, what the store holds."""

from __future__ import annotations

import asyncio
import json

import pytest

from engine.fleet.errors import VersionConflict
from engine.fleet.records import Keys, Member, ServerStatus
from engine.fleet.store import FleetStore
from tests.engine.fleet.processes import Etcd

pytestmark = pytest.mark.slow  # starts processes or servers: `make test-fast` leaves it out


def main(argv: list[str]) -> int:
    """`sgconf fleet ...` as the console script runs it (bad input is printed and exits 2)."""
    from sgconf.serving import main as sgconf_main

    return sgconf_main(["fleet", *argv])


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def store_call(etcd: Etcd, fn):  # type: ignore[no-untyped-def]
    async def go():  # type: ignore[no-untyped-def]
        async with FleetStore(etcd.url) as store:
            return await fn(store)

    return asyncio.run(go())


def test_set_publishes_versions_on_top_of_each_other(
    etcd: Etcd, fleet_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "set", fleet_name, "schedule_policy=lpm", "stream_interval=2", "--store", etcd.url)
    assert (code, out) == (0, f"fleet {fleet_name!r}: published version 1: schedule_policy='lpm', stream_interval=2\n")
    code, out, _ = run(
        capsys,
        "set",
        fleet_name,
        "stream_interval=4",
        "--unset",
        "schedule_policy",
        "--store",
        etcd.url,
        "--format",
        "json",
    )
    assert code == 0
    desired = json.loads(out)["desired"]
    assert (desired["version"], desired["fields"]) == (2, {"stream_interval": 4})
    code, out, _ = run(capsys, "history", fleet_name, "--store", etcd.url)
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == ["1", "2"]
    assert lines[1].endswith(": stream_interval=4")


def test_bad_input_writes_nothing(etcd: Etcd, fleet_name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A bad value exits 2 with the field, value and fix; the fleet has no version afterwards."""
    code = main(["set", fleet_name, "max_running_requests=lots", "--store", etcd.url])
    assert code == 2
    assert "'max_running_requests': expected an integer (got 'lots')" in capsys.readouterr().err
    assert store_call(etcd, lambda s: s.history(fleet_name)) == []


def test_compare_and_swap_refuses_a_stale_writer(
    etcd: Etcd, fleet_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two operators read version 1; the second write fails instead of silently replacing the first."""
    assert main(["set", fleet_name, "stream_interval=2", "--store", etcd.url]) == 0

    async def race(store: FleetStore) -> str:
        base = await store.desired(fleet_name)
        await store.publish(fleet_name, {"stream_interval": 3}, base=base[:2])  # the first operator
        with pytest.raises(VersionConflict) as err:
            await store.publish(fleet_name, {"stream_interval": 9}, base=base[:2])  # the second, from the same read
        return str(err.value)

    msg = store_call(etcd, race)
    assert msg == (
        f"fleet {fleet_name!r} moved from version 1 to 2 while this change was written; nothing was written"
        f" -- look at version 2 with 'sgconf fleet status {fleet_name}' and set again"
    )
    capsys.readouterr()
    code, _, err = run(capsys, "set", fleet_name, "stream_interval=5", "--expect-version", "1", "--store", etcd.url)
    assert code == 1
    assert err.startswith(f"sgconf fleet: fleet {fleet_name!r} is at version 2, not 1 (--expect-version)")
    desired, _, _ = store_call(etcd, lambda s: s.desired(fleet_name))
    assert (desired.version, desired.fields) == (2, {"stream_interval": 3})


def test_rollback_publishes_an_old_version_as_the_next(
    etcd: Etcd, fleet_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for value in ("2", "3"):
        assert main(["set", fleet_name, f"stream_interval={value}", "--store", etcd.url]) == 0
    capsys.readouterr()
    code, out, _ = run(capsys, "rollback", fleet_name, "1", "--store", etcd.url)
    assert (code, out) == (0, f"fleet {fleet_name!r}: published version 3: stream_interval=2\n")
    desired, _, _ = store_call(etcd, lambda s: s.desired(fleet_name))
    assert (desired.version, desired.rolled_back_from) == (3, 1)
    code, _, err = run(capsys, "rollback", fleet_name, "7", "--store", etcd.url)
    assert (code, err) == (
        1,
        f"sgconf fleet: fleet {fleet_name!r} has no version 7 (it has versions 1 to 3)"
        f" -- see 'sgconf fleet history {fleet_name}'\n",
    )


def test_status_shows_the_split_and_exits_1_until_every_running_server_acks(
    etcd: Etcd, fleet_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["set", fleet_name, "max_running_requests=32", "--store", etcd.url]) == 0

    async def report(store: FleetStore) -> None:
        await store.join(fleet_name, Member("a"), ttl_s=30)
        await store.join(fleet_name, Member("b"), ttl_s=30)
        await store.put_status(fleet_name, ServerStatus("a", "ack", 1, 1))
        await store.put_status(
            fleet_name, ServerStatus("b", "nack", 1, None, reason="'max_running_requests' may be at most 16")
        )
        await store.put_status(fleet_name, ServerStatus("c", "ack", 1, 1))  # its member key is gone: it stopped

    store_call(etcd, report)
    capsys.readouterr()
    code, out, _ = run(capsys, "status", fleet_name, "--store", etcd.url)
    assert code == 1
    lines = out.splitlines()
    assert lines[1:] == [
        "server  state     version  running  alive",
        "a       ACK             1        1  yes",
        "b       NACK            1        -  yes",
        "    'max_running_requests' may be at most 16",
        "c       ACK             1        1  no",
        "1 of 2 running server(s) run version 1; 1 refused it (keeping version launch); 1 stopped",
    ]
    data = json.loads(run(capsys, "status", fleet_name, "--store", etcd.url, "--format", "json")[1])
    assert data["in_sync"] is False
    assert [(s["server"], s["state"], s["alive"]) for s in data["servers"]] == [
        ("a", "ack", True),
        ("b", "nack", True),
        ("c", "ack", False),
    ]


def test_the_store_never_holds_a_secret_in_clear(
    etcd: Etcd, fleet_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A clear secret is refused before any write; a reference is what the key holds."""
    code = main(["set", fleet_name, "admin_api_key=very-secret-admin-key", "--store", etcd.url])
    assert code == 2
    assert "very-secret-admin-key" not in capsys.readouterr().err
    assert (
        main(
            [
                "set",
                fleet_name,
                "hicache_storage_backend=file",
                "hicache_storage_backend_extra_config=@file:/run/secrets/kv.json",
                "--store",
                etcd.url,
            ]
        )
        == 0
    )

    async def raw(store: FleetStore) -> list[bytes]:
        got = await store._client.get_prefix(Keys(fleet_name).prefix.encode())
        return [kv.value for kv in got]

    values = store_call(etcd, raw)
    assert values and all(b"very-secret" not in v for v in values)
    assert all(b'{"secret_ref": "file:/run/secrets/kv.json"}' in v for v in values)


def test_an_unreachable_store_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.support import free_port

    port = free_port()
    code, _, err = run(capsys, "status", "prod", "--store", f"etcd://127.0.0.1:{port}")
    assert code == 1
    assert err.startswith(
        f"sgconf fleet: the fleet store etcd://127.0.0.1:{port} did not answer (read the desired config:"
    )
    assert err.endswith("-- check that etcd runs there and is reachable\n")
    code, _, err = run(capsys, "status", "prod", "--store", "http://127.0.0.1:2379")
    assert (code, err) == (
        1,
        "sgconf fleet: --store must be etcd://host:port (got 'http://127.0.0.1:2379') -- e.g. etcd://127.0.0.1:2379\n",
    )
