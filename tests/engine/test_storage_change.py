"""One storage change for one engine and for each replica: the same refusals, the same cleanup."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.dp.replica import BoundaryEffect
from engine.engine import Engine
from engine.errors import StorageRefused
from engine.storage_change import ATTACH_SOURCE, StorageChange, attach_values


@pytest.fixture
def make_engine(make_engine: Callable[..., Engine]) -> Callable[..., Engine]:
    """The suite's factory on a small pool: attach and detach need no more."""
    return functools.partial(make_engine, "--max-total-tokens", "256")


def _refusal_on_engine(engine: Engine, values: dict[str, Any]) -> StorageRefused:
    with pytest.raises(StorageRefused) as exc:
        engine.attach_storage_backend(
            values["hicache_storage_backend"], extra_config=values["hicache_storage_backend_extra_config"]
        )
    return exc.value


def _refusal_on_replica(engine: Engine, values: dict[str, Any]) -> StorageRefused:
    with pytest.raises(StorageRefused) as exc:
        BoundaryEffect(engine)(ATTACH_SOURCE, values)
    return exc.value


def test_cache_off_is_refused_by_the_rule_first_and_by_the_change_after(make_engine) -> None:
    """Without the cache: the engine refuses as a group's coordinator does (the rule), a replica's change the same way."""
    from sgconf.errors import ConfigError

    engine = make_engine()
    values = attach_values("memory")
    with pytest.raises(ConfigError) as exc:
        engine.attach_storage_backend("memory")
    assert not isinstance(exc.value, StorageRefused)
    assert exc.value.lines() == [
        "$.memory.enable_hierarchical_cache: --hicache-storage-backend requires --enable-hierarchical-cache"
        " -- enable the hierarchical cache at launch (from override hicache.attach)"
    ]
    expected = [
        "$.memory.enable_hierarchical_cache: the hierarchical cache is off"
        " -- start with --enable-hierarchical-cache to attach storage"
    ]
    with pytest.raises(StorageRefused) as refused:
        StorageChange.prepare(None, values)
    assert refused.value.lines() == expected
    assert _refusal_on_replica(engine, values).lines() == expected
    assert engine.boundary.holding() is False  # the replica's parked loop was released
    assert engine.detach_storage_backend() is None  # nothing attached: a no-op, as in a group


def test_a_backend_that_cannot_open_is_one_refusal_on_an_engine_and_on_a_replica(make_engine, tmp_path: Path) -> None:
    """A dir that is a file: both paths name the same field with the same text; nothing attached."""
    from runtime.serving import get_memory

    engine = make_engine("--enable-hierarchical-cache")
    (tmp_path / "kv").write_text("not a directory")
    values = attach_values("file", extra_config={"dir": str(tmp_path / "kv")})
    on_engine = _refusal_on_engine(engine, values).lines()
    assert on_engine == _refusal_on_replica(engine, values).lines()
    assert on_engine[0].startswith("$.memory.hicache_storage_backend_extra_config.dir: ")
    assert get_memory().hicache_storage_backend is None
    assert engine.hicache is not None and engine.hicache.controller.storage_backend is None


def test_abort_releases_what_prepare_created_and_commit_then_abort_is_safe(make_engine, tmp_path: Path) -> None:
    """Aborting a prepared attach removes the directory it created; an abort after commit changes nothing."""
    engine = make_engine("--enable-hierarchical-cache")
    assert engine.hicache is not None
    controller = engine.hicache.controller
    new_dir = tmp_path / "fresh" / "pages"
    change = StorageChange.prepare(controller, attach_values("file", extra_config={"dir": str(new_dir)}))
    assert change.attaches and new_dir.is_dir()
    change.abort()
    assert not (tmp_path / "fresh").exists() and controller.storage_backend is None

    change = StorageChange.prepare(controller, attach_values("memory"))
    change.commit()
    change.abort()
    assert controller.storage_backend is not None and controller.storage_backend.name == "memory"
    detach = StorageChange.prepare(controller, {"hicache_storage_backend": None})
    assert not detach.attaches
    detach.abort()  # a detach touches nothing before commit
    assert controller.storage_backend is not None
    detach.commit()
    assert controller.storage_backend is None
