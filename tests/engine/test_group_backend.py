"""The replica group's answers to config changes: chosen from each refusal's typed reason, never its text."""

from __future__ import annotations

from typing import Any

import pytest

from engine.dp.group_backend import ReplicaGroupBackend
from engine.errors import DrainTimeout
from runtime.errors import PropagationFailed, RanksSilent


class FakeController:
    """Stands in for DPController: `propagate` raises what a round ended with."""

    dp_size = 2
    vocab_size = 256

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
    refused = PropagationFailed("hicache.attach", {2: [REASON]}, timeout_s=10, reasons={2: "drain_timeout"})
    backend = ReplicaGroupBackend(FakeController(refused))
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
        (
            "hicache.attach",
            {"hicache_storage_backend": "file", "hicache_storage_backend_extra_config": {"dir": str(tmp_path)}},
        )
    ]


def test_a_drain_phrase_without_the_reason_is_not_a_drain_timeout(server_args) -> None:
    """The text of a refusal decides nothing: a refusal that only says the words stays what its reason says."""
    refused = PropagationFailed("hicache.attach", {2: [REASON]}, timeout_s=10, reasons={2: "storage"})
    with pytest.raises(PropagationFailed) as exc:
        ReplicaGroupBackend(FakeController(refused)).attach({"hicache_storage_backend": "memory"})
    assert exc.value is refused


@pytest.mark.parametrize(
    ("reasons", "status"),
    [
        ({0: "invalid"}, 422),
        ({1: "not_hot"}, 422),
        ({2: "capacity"}, 422),
        ({1: "storage"}, 400),
        ({1: "diverged"}, 409),
        ({1: "drain_timeout"}, 409),
        ({1: "failed"}, 503),
        ({1: "drain_timeout", 2: "capacity"}, 422),  # what the client must fix comes first
        ({1: "storage", 2: "failed"}, 400),
    ],
)
def test_the_status_of_a_refused_round_comes_from_its_reasons(reasons: dict[int, str], status: int) -> None:
    """Each reason has the status one engine raising it would answer; the rank that refused does not matter."""
    from engine.http.problems import status_of

    refused = PropagationFailed("x", {rank: ["$.f: no"] for rank in reasons}, timeout_s=1, reasons=reasons)
    assert status_of(refused) == status


def test_every_refusal_reason_has_a_status() -> None:
    """A reason added to Refusal without a status would answer 503 silently: the table lists each one."""
    from engine.errors import Refusal
    from engine.http.problems import STATUS_BY_REFUSAL

    assert sorted(reason.value for reason, _ in STATUS_BY_REFUSAL) == sorted(r.value for r in Refusal)


def test_an_unreadable_group_message_is_a_server_fault_not_an_internal_error() -> None:
    """A rank answering what the coordinator cannot read is a bad answer from upstream (502), never a bare 500."""
    from engine.http.problems import problem_of
    from runtime.errors import GroupMessageError

    problem = problem_of(GroupMessageError("a config-group 'ack' message is malformed"))
    assert (problem.status, problem.detail) == (502, "a config-group 'ack' message is malformed")
