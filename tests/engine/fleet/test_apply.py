"""One version onto one engine: the HTTP override and attach paths, all or nothing, last good kept on NACK."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.engine import Engine
from engine.fleet.apply import FleetApplier
from engine.fleet.records import DesiredConfig
from engine.http.engine_backend import EngineBackend
from runtime import override_server_args
from runtime.context import get_context
from runtime.serving import get_memory, get_schedule, get_serving

pytestmark = pytest.mark.server_args_shared


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    with override_server_args(max_total_tokens=1024, max_running_requests=16, enable_hierarchical_cache=True) as ctx:
        eng = Engine(ctx.record)
        try:
            yield eng
        finally:
            eng.shutdown(unpublish=False)


def test_a_version_applies_and_a_dropped_field_goes_back_to_its_launch_value(engine: Engine) -> None:
    applier = FleetApplier(EngineBackend(engine), "prod")
    one = applier.apply(DesiredConfig(1, {"schedule_policy": "lpm", "stream_interval": 3}))
    assert (one.state, one.version, one.applied_version, one.changed) == (
        "ack",
        1,
        1,
        ("schedule_policy", "stream_interval"),
    )
    assert (get_schedule().schedule_policy, get_serving().stream_interval) == ("lpm", 3)
    assert get_context().overrides_log()[-1].source == "fleet.prod@v1"
    two = applier.apply(DesiredConfig(2, {"stream_interval": 3}))
    assert (two.state, two.changed) == ("ack", ("schedule_policy",))
    assert (get_schedule().schedule_policy, get_serving().stream_interval) == ("fcfs", 3)
    same = get_context().generation
    assert applier.apply(DesiredConfig(3, {"stream_interval": 3})).changed == ()  # nothing differs: no new generation
    assert get_context().generation == same
    applier.apply(DesiredConfig(4, {}))
    assert get_serving().stream_interval == 1


def test_a_refused_version_changes_nothing_and_keeps_the_last_good(engine: Engine) -> None:
    """Above the planned capacity: NACK with the engine's reason; no field of the version went in."""
    applier = FleetApplier(EngineBackend(engine), "cap")
    assert applier.apply(DesiredConfig(1, {"schedule_conservativeness": 0.5})).state == "ack"
    generation = get_context().generation
    out = applier.apply(DesiredConfig(2, {"schedule_conservativeness": 0.7, "max_running_requests": 64}))
    assert (out.state, out.version, out.applied_version) == ("nack", 2, 1)
    assert out.reason is not None
    assert "'max_running_requests' may be at most 16, the capacity planned at start-up (got 64)" in out.reason
    assert get_context().generation == generation
    assert get_schedule().schedule_conservativeness == 0.5
    assert applier.apply(DesiredConfig(3, {"schedule_conservativeness": 0.7, "max_running_requests": 8})).state == "ack"
    assert (get_schedule().schedule_conservativeness, get_schedule().max_running_requests) == (0.7, 8)
    applier.apply(DesiredConfig(4, {}))


def test_storage_rides_the_attach_path_and_a_failed_attach_undoes_the_overrides(engine: Engine, tmp_path: Path) -> None:
    applier = FleetApplier(EngineBackend(engine), "kv")
    out = applier.apply(
        DesiredConfig(
            1,
            {
                "hicache_storage_backend": "file",
                "stream_interval": 2,
                "hicache_storage_backend_extra_config": {"dir": str(tmp_path)},
            },
        )
    )
    assert out.state == "ack", out.reason
    assert get_memory().hicache_storage_backend == "file"
    assert engine.storage_status()["storage_dir"] == str(tmp_path.resolve())
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    bad = applier.apply(
        DesiredConfig(
            2,
            {
                "hicache_storage_backend": "file",
                "stream_interval": 5,
                "hicache_storage_backend_extra_config": {"dir": str(blocked)},
            },
        )
    )
    assert (bad.state, bad.applied_version) == ("nack", 1)
    assert (get_serving().stream_interval, engine.storage_status()["storage_dir"]) == (2, str(tmp_path.resolve()))
    assert applier.apply(DesiredConfig(3, {})).state == "ack"  # dropped: detached, back to launch values
    assert (get_memory().hicache_storage_backend, get_serving().stream_interval) == (None, 1)


def test_a_secret_reference_is_read_on_the_server_and_its_absence_is_a_nack(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    applier = FleetApplier(EngineBackend(engine), "ref")
    monkeypatch.delenv("FLEET_TEST_LEVEL", raising=False)
    out = applier.apply(DesiredConfig(1, {"log_level": {"secret_ref": "env:FLEET_TEST_LEVEL"}}))
    assert out.state == "nack"
    assert "'log_level' refers to environment variable FLEET_TEST_LEVEL, which is unset or empty on this server" in str(
        out.reason
    )
    monkeypatch.setenv("FLEET_TEST_LEVEL", "debug")
    assert applier.apply(DesiredConfig(2, {"log_level": {"secret_ref": "env:FLEET_TEST_LEVEL"}})).state == "ack"
    assert get_context().value("log_level") == "debug"
    applier.apply(DesiredConfig(3, {}))


def test_a_field_this_server_does_not_know_is_a_nack(engine: Engine) -> None:
    """Each server checks a version against its own schema."""
    out = FleetApplier(EngineBackend(engine), "schema").apply(DesiredConfig(1, {"max_lora_rank": 8}))
    assert out.state == "nack"
    assert "unknown field 'max_lora_rank'" in str(out.reason)
