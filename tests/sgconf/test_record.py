"""The record and its projection into bags."""

from __future__ import annotations

import threading

import attrs
import pytest

from sgconf import ServerArgs
from sgconf.record import to_bags


def test_building_bags_in_many_threads_leaves_attrs_validation_on() -> None:
    """Eight threads projecting records never switch attrs' process-wide validators off."""
    start = threading.Barrier(8, timeout=60)
    errors: list[BaseException] = []

    def project() -> None:
        try:
            start.wait()
            for _ in range(200):
                to_bags(ServerArgs(page_size=16))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=project) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    assert attrs.validators.get_disabled() is False
    with pytest.raises(ValueError):
        ServerArgs(page_size=12, schedule_conservativeness=-3.0)


def test_projected_bags_equal_validated_ones() -> None:
    """Bags built without re-validation equal bags built through their constructors."""
    record = ServerArgs(page_size=16, tp_size=2)
    bags = to_bags(record)
    schedule = bags["schedule"]
    assert schedule == attrs.evolve(schedule) and schedule.page_size == 16
    assert bags["exec"].kernel == attrs.evolve(bags["exec"].kernel)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        schedule.page_size = 2  # type: ignore[misc]


def test_projection_never_touches_the_process_wide_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    """to_bags() skips validators per object; attrs' global switch is never flipped."""

    def refuse(_: bool) -> None:
        raise AssertionError("attrs.validators.set_disabled was called")

    monkeypatch.setattr(attrs.validators, "set_disabled", refuse)
    assert to_bags(ServerArgs(page_size=4))["schedule"].page_size == 4
