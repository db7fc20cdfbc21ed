"""Admin access: exact bearer bytes, a key file re-read when it changes, refusals at start-up, split listeners."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from engine.engine import Engine
from engine.http.app import create_app
from engine.http.engine_backend import EngineBackend
from engine.serve import check_admin_key_file
from sgconf import load
from sgconf.errors import ConfigError

KEY = "s3cret-admin"


@pytest.fixture
def started() -> Iterator:
    engines: list[Engine] = []

    def start(*argv: str, **app: bool) -> TestClient:
        engine = Engine.from_args(["--max-total-tokens", "256", "--enable-hierarchical-cache", *argv])
        engines.append(engine)
        return TestClient(create_app(EngineBackend(engine), **app))

    yield start
    for engine in engines:
        engine.shutdown()


@pytest.mark.parametrize(
    "header",
    [
        b"Bearer \xc2\xa0",  # a non-breaking space: strips to the empty key
        b"Bearer s3cret-admin\xc2\xa0",  # the right key plus a Unicode space
        b"Bearer \xc2\xa0s3cret-admin",
        b"Bearer s3cret-admi",
    ],
)
def test_only_the_exact_key_bytes_are_let_in(started, header: bytes) -> None:
    """Nothing is stripped from the token, so a Unicode space never turns a wrong key into a match."""
    client = started("--admin-api-key", KEY)
    r = client.get("/hicache/storage-backend", headers=[(b"authorization", header)])
    assert r.status_code == 403
    ok = client.get("/hicache/storage-backend", headers={"Authorization": f"bearer {KEY}"})
    assert ok.status_code == 200  # the scheme is matched without case, as HTTP asks


def test_the_key_file_is_read_and_rotated(started, tmp_path: Path) -> None:
    """A key from --admin-api-key-file works; writing a new key into the file retires the old one at once."""
    key_file = tmp_path / "admin.key"
    key_file.write_text("first-key\n")
    client = started("--admin-api-key-file", str(key_file))
    assert client.get("/hicache/storage-backend", headers={"Authorization": "Bearer first-key"}).status_code == 200
    key_file.write_text("second-key-longer\n")
    os.utime(key_file, ns=(1, 10**18))  # a new mtime even on a coarse clock
    assert client.get("/hicache/storage-backend", headers={"Authorization": "Bearer first-key"}).status_code == 403
    assert (
        client.get("/hicache/storage-backend", headers={"Authorization": "Bearer second-key-longer"}).status_code == 200
    )
    info = client.get("/server_info").json()["config"]["serving"]
    assert info["admin_api_key"] is None and info["admin_api_key_file"] == str(key_file)


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("", "is empty or only whitespace"),
        ("  \n", "is empty or only whitespace"),
        (None, "(No such file or directory)"),
    ],
)
def test_a_bad_key_file_stops_the_start(tmp_path: Path, content: str | None, why: str) -> None:
    """An empty, blank or missing key file is refused before anything is built, naming the file."""
    path = tmp_path / "admin.key"
    if content is not None:
        path.write_text(content)
    serving = load(["--admin-api-key-file", str(path)]).record
    with pytest.raises(ConfigError) as info:
        check_admin_key_file(serving)
    (line,) = info.value.lines()
    assert line.startswith("$.serving.admin_api_key_file: ") and str(path) in line and why in line


def test_the_admin_key_is_taken_from_the_environment() -> None:
    """SGCONF_ADMIN_API_KEY sets the key without putting it in the process's command line."""
    loaded = load([], env={"SGCONF_ADMIN_API_KEY": KEY})
    assert loaded.record.admin_api_key == KEY
    assert loaded.winner("admin_api_key").describe() == "from env SGCONF_ADMIN_API_KEY"


def test_split_apps_hold_their_own_routes(started) -> None:
    """With a separate admin listener the public app has no admin routes (404) and the admin app no inference."""
    public = started("--admin-api-key", KEY, admin=False)
    auth = {"Authorization": f"Bearer {KEY}"}
    assert public.get("/hicache/storage-backend", headers=auth).status_code == 404
    assert public.post("/config/overrides", json={"stream_interval": 2}, headers=auth).status_code == 404
    assert public.post("/generate", json={"text": "hi", "max_new_tokens": 2}).status_code == 200
    admin = started("--admin-api-key", KEY, public=False)
    assert admin.post("/generate", json={"text": "hi", "max_new_tokens": 2}).status_code == 404
    assert admin.get("/hicache/storage-backend", headers=auth).status_code == 200
    assert admin.get("/health").status_code == 200
