"""The replica group's answers to config changes: a drain that timed out on a replica is a 409, like one engine's."""

from __future__ import annotations

from typing import Any

import pytest

from engine.dp.group_backend import ReplicaGroupBackend
from engine.errors import DrainTimeout
from runtime.distributed import PropagationFailed, RanksSilent


class FakeController:
    """Stands in for DPController: `propagate` raises what a round ended with."""

    dp_size = 2

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def propagate(self, source: str, **fields: Any) -> Any:
        self.sent.append((source, fields))
        raise self.error

    def busy(self) -> tuple[int, int]:
        return 1, 3


REASON = (
    "cannot apply the override from 'hicache.attach': the drain did not come within 5 s "
    "(0 queued, 3 running requests); nothing changed -- retry later, or raise drain_timeout_s"
)


@pytest.mark.server_args(drain_timeout_s=7.5)
def test_a_replica_drain_timeout_becomes_drain_timeout(server_args) -> None:
    """A refusal carrying a replica's drain timeout is raised as DrainTimeout with the group's retry hint."""
    backend = ReplicaGroupBackend(FakeController(PropagationFailed("hicache.attach", {2: [REASON]}, timeout_s=10)))
    with pytest.raises(DrainTimeout) as exc:
        backend.attach({"hicache_storage_backend": "memory"})
    assert (exc.value.running, exc.value.retry_after_s) == (3, 7.5)
    assert str(exc.value).endswith(REASON)


def test_other_refusals_pass_through(server_args) -> None:
    """A refusal for any other reason, or a silent rank, is raised unchanged (400 / 503 by type)."""
    refused = PropagationFailed("http.config_overrides", {1: ["$.schedule.x: bad"]}, timeout_s=10)
    with pytest.raises(PropagationFailed) as exc:
        ReplicaGroupBackend(FakeController(refused)).override("http.config_overrides", {"stream_interval": 2})
    assert exc.value is refused
    silent = RanksSilent("http.config_overrides", {1: [REASON]}, [2], timeout_s=10)
    with pytest.raises(RanksSilent):
        ReplicaGroupBackend(FakeController(silent)).override("http.config_overrides", {"stream_interval": 2})


def test_attach_without_dir_sends_the_default_dir(server_args, tmp_path, monkeypatch) -> None:
    """A file attach without a dir propagates the default directory, so every replica records the same one."""
    monkeypatch.setenv("SGCONF_HICACHE_FILE_DIR", str(tmp_path))
    controller = FakeController(PropagationFailed("hicache.attach", {1: ["no"]}, timeout_s=10))
    with pytest.raises(PropagationFailed):
        ReplicaGroupBackend(controller).attach({"hicache_storage_backend": "file"})
    assert controller.sent == [
        ("hicache.attach", {"hicache_storage_backend": "file", "hicache_storage_backend_extra_config": {"dir": str(tmp_path)}})
    ]
