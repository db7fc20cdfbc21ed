"""One storage change for one engine and for each replica: the same refusals, the same cleanup."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.dp.replica import BoundaryEffect
from engine.engine import Engine
from engine.errors import InvalidAttach, StorageRefused
from engine.storage_change import ATTACH_SOURCE, StorageChange, attach_values
from sgconf.errors import ConfigError


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


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        (
            [1],
            '$.memory.hicache_storage_backend_extra_config: expected an object, got [1] -- pass an object like {"dir": "/path"}',
        ),
        (
            "{bad",
            "$.memory.hicache_storage_backend_extra_config: expected a JSON object (Expecting property name enclosed in"
            ' double quotes at char 1), got \'{bad\' -- pass an object like {"dir": "/path"}',
        ),
        (
            '{"dir": NaN}',
            "$.memory.hicache_storage_backend_extra_config: expected a JSON object ('dir' is nan, not a JSON number),"
            ' got \'{"dir": NaN}\' -- pass an object like {"dir": "/path"}',
        ),
    ],
    ids=["list", "bad_json", "nan"],
)
def test_malformed_attach_options_are_one_refusal_from_python_and_http(
    serve, monkeypatch: pytest.MonkeyPatch, extra: Any, line: str
) -> None:
    """Options that are not a JSON object: the same InvalidAttach (422) naming the field and value, nothing changed.

    Opening the backend directly refuses them for the same reason (one check of a
    backend's options), and an attach over HTTP is checked once, not once per layer.
    """
    import engine.http.bodies
    import engine.storage_change
    from mem_cache.hicache.backends import create_storage_backend
    from mem_cache.hicache.errors import StorageAttachError
    from runtime.serving import get_memory
    from tests.engine.serving import ADMIN_AUTH

    engine_, client = serve()
    with pytest.raises(InvalidAttach) as info:
        engine_.attach_storage_backend("file", extra_config=extra)
    assert isinstance(info.value, ConfigError) and info.value.lines() == [line]
    with pytest.raises(StorageAttachError) as opened:
        create_storage_backend("file", extra)
    assert f"$.memory.{opened.value.field}: {opened.value}" == line
    checks: list[Any] = []
    real = engine.storage_change.checked_attach

    def counted(*args: Any) -> Any:
        checks.append(args)
        return real(*args)

    monkeypatch.setattr(engine.storage_change, "checked_attach", counted)
    monkeypatch.setattr(engine.http.bodies, "checked_attach", counted, raising=False)
    key = (
        "hicache_storage_backend_extra_config_json"
        if isinstance(extra, str)
        else "hicache_storage_backend_extra_config"
    )
    r = client.put("/hicache/storage-backend", json={"hicache_storage_backend": "file", key: extra}, headers=ADMIN_AUTH)
    assert (r.status_code, r.json()["errors"]) == (422, [line])
    assert len(checks) == 1
    assert get_memory().hicache_storage_backend is None


def _raises_value_error(extra_config: Any) -> Any:
    raise ValueError("'colour' is not an option here")


def _raises_type_error(extra_config: Any) -> Any:
    raise TypeError("open() missing 1 required positional argument: 'url'")


def _returns_none(extra_config: Any) -> Any:
    return None


@pytest.mark.parametrize(
    ("factory", "why"),
    [
        (
            _raises_value_error,
            "storage backend 'broken' failed to open: ValueError: 'colour' is not an option here"
            " -- check its options in 'hicache_storage_backend_extra_config', or choose another backend",
        ),
        (
            _raises_type_error,
            "storage backend 'broken' failed to open: TypeError: open() missing 1 required positional argument: 'url'"
            " -- check its options in 'hicache_storage_backend_extra_config', or choose another backend",
        ),
        (
            _returns_none,
            "storage backend 'broken' gave NoneType, not a storage backend"
            " -- its factory must return a StorageBase; fix the plug-in or choose another backend",
        ),
    ],
    ids=["value_error", "type_error", "none"],
)
def test_a_plugin_factory_that_fails_is_refused_naming_the_backend(make_engine, factory: Any, why: str) -> None:
    """A factory that raises or returns no backend: StorageRefused at the backend field, on an engine and a replica."""
    from mem_cache.hicache.backends import STORAGE_BACKENDS, register_storage_backend

    engine = make_engine("--enable-hierarchical-cache")
    register_storage_backend("broken", factory)
    try:
        values = attach_values("broken")
        expected = [f"$.memory.hicache_storage_backend: {why}"]
        assert _refusal_on_engine(engine, values).lines() == expected
        assert _refusal_on_replica(engine, values).lines() == expected
        assert engine.boundary.holding() is False
    finally:
        STORAGE_BACKENDS.unregister("broken")
    assert engine.hicache is not None and engine.hicache.controller.storage_backend is None


@pytest.fixture
def installed_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A package on the path shipping two storage backends through the entry-point group: one works, one cannot import."""
    import importlib

    from mem_cache.hicache.backends import STORAGE_BACKENDS

    (tmp_path / "sgconf_test_backends.py").write_text(
        "from mem_cache.hicache.memory_storage import open_memory_storage\n\n\n"
        "def open_mine(extra_config):\n    return open_memory_storage(extra_config)\n"
    )
    dist = tmp_path / "sgconf_test_backends-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sgconf-test-backends\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[sgconf.storage_backends]\nmine = sgconf_test_backends:open_mine\n"
        "unimportable = sgconf_test_no_such_module:open_it\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    STORAGE_BACKENDS.refresh()  # installed after the registry first looked
    try:
        yield
    finally:
        for name in ("mine", "unimportable"):
            STORAGE_BACKENDS.unregister(name)
        monkeypatch.undo()
        STORAGE_BACKENDS.refresh()


def test_a_backend_of_an_installed_package_attaches_at_runtime(installed_plugins, serve) -> None:
    """The package's backend is chosen by name: through Engine.attach_storage_backend and through HTTP."""
    from runtime.serving import get_memory
    from tests.engine.serving import ADMIN_AUTH

    engine, client = serve()
    engine.attach_storage_backend("mine")
    assert get_memory().hicache_storage_backend == "mine"
    assert engine.hicache is not None and engine.hicache.controller.storage_backend is not None
    engine.detach_storage_backend()
    assert engine.hicache.controller.storage_backend is None
    r = client.put("/hicache/storage-backend", json={"hicache_storage_backend": "mine"}, headers=ADMIN_AUTH)
    assert r.status_code == 200, r.text
    assert client.get("/hicache/storage-backend", headers=ADMIN_AUTH).json()["hicache_storage_backend"] == "mine"
    assert engine.hicache.controller.storage_backend is not None


def test_a_backend_that_cannot_import_is_refused_at_the_backend_field(installed_plugins, serve) -> None:
    """An entry point whose module is missing: the same StorageRefused as any backend that cannot open, not a 500."""
    from tests.engine.serving import ADMIN_AUTH

    engine, client = serve()
    values = attach_values("unimportable")
    lines = _refusal_on_engine(engine, values).lines()
    assert lines == _refusal_on_replica(engine, values).lines()
    assert len(lines) == 1
    assert lines[0].startswith(
        "$.memory.hicache_storage_backend: HiCache storage backend 'unimportable' from entry point"
        " sgconf_test_no_such_module:open_it cannot be loaded: ModuleNotFoundError"
    )
    r = client.put("/hicache/storage-backend", json={"hicache_storage_backend": "unimportable"}, headers=ADMIN_AUTH)
    assert (r.status_code, r.json()["errors"]) == (400, lines)
