"""Storage through the HTTP app: forged pages never change outputs, failing writes show as degraded, paths resolve."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from mem_cache.hicache import PageCodec
from tests.engine.serving import ADMIN_AUTH as AUTH

PROMPT = "Pages of this prompt go to storage and come back only if they are ours."


def attach(client: TestClient, directory: Path | str, **extra: str) -> dict:
    body = {
        "hicache_storage_backend": "file",
        "hicache_storage_backend_extra_config_json": f'{{"dir": "{directory}"}}',
        "hicache_storage_prefetch_policy": "wait_complete",
        **extra,
    }
    r = client.put("/hicache/storage-backend", json=body, headers=AUTH)
    assert r.status_code == 200, r.text
    return r.json()


def generate(client: TestClient) -> list[int]:
    r = client.post("/generate", json={"text": PROMPT, "max_new_tokens": 10})
    assert r.status_code == 200, r.text
    return r.json()["output_ids"]


def fill(serve, directory: Path) -> list[int]:
    """Store PROMPT's pages in `directory` from a fresh engine; returns its output (no storage involved yet)."""
    engine, client = serve()
    attach(client, directory)
    out = generate(client)
    generate(client)  # backs the finished prefix up
    engine.shutdown()
    return out


@pytest.mark.parametrize("attack", ["forged", "swapped"])
def test_forged_pages_are_ignored_and_outputs_equal_a_run_without_storage(serve, tmp_path: Path, attack: str) -> None:
    """Pages re-signed without the key, or moved to another page's name, are counted misses; output is unchanged."""
    _plain_engine, plain = serve()
    baseline = generate(plain)  # no storage at all
    assert fill(serve, tmp_path) == baseline
    pages = sorted(tmp_path.rglob("*.kvpage"))
    assert len(pages) >= 10
    forger = PageCodec(bytes(range(32)))  # can write the directory, cannot read the 0600 key file
    if attack == "forged":
        for p in pages:
            p.write_bytes(forger.encode(p.stem, bytes(len(p.read_bytes()) - 52 - len(p.stem))))
    else:  # every page holds its neighbour's (valid, signed) bytes
        blobs = [p.read_bytes() for p in pages]
        for p, blob in zip(pages, blobs[1:] + blobs[:1], strict=True):
            p.write_bytes(blob)

    engine, client = serve()
    attach(client, tmp_path)
    assert generate(client) == baseline
    stats = engine.stats()["hicache"]
    assert stats["forged_skipped"] >= 1
    assert stats["storage_hits"] == 0
    assert stats["corrupt_skipped"] == 0


def test_configured_mac_key_is_redacted_and_must_match(serve, tmp_path: Path) -> None:
    """With hicache_storage_mac_key the key file is not used; /server_info shows only ***; another key reads nothing."""
    secret = "a storage secret of some length"
    engine, client = serve("--hicache-storage-mac-key", secret)
    attach(client, tmp_path)
    out = generate(client)
    generate(client)
    info = client.get("/server_info")
    assert info.json()["config"]["memory"]["hicache_storage_mac_key"] == "***"
    assert secret not in info.text
    assert info.json()["storage"]["mac_key_source"] == "setting"
    assert not (tmp_path / ".sgconf-mac-key").exists()
    engine.shutdown()

    other, client2 = serve("--hicache-storage-mac-key", "another secret, also long")
    attach(client2, tmp_path)
    assert generate(client2) == out
    assert other.stats()["hicache"]["forged_skipped"] >= 1


def test_relative_dir_with_dotdot_is_shown_resolved(serve, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`..` in the directory resolves; storage status and /server_info show the path in use."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "work").mkdir()
    _engine, client = serve()
    attach(client, "work/../kv/./pages")
    resolved = str((tmp_path / "kv" / "pages").resolve())
    status = client.get("/hicache/storage-backend", headers=AUTH).json()
    assert status["storage"]["dir"] == resolved
    assert client.get("/server_info").json()["storage"]["dir"] == resolved
    r = client.put(
        "/hicache/storage-backend",
        headers=AUTH,
        json={"hicache_storage_backend": "file", "hicache_storage_backend_extra_config_json": '{"dir": "kv\\u0000x"}'},
    )
    assert r.status_code == 400
    assert r.json()["errors"] == [
        "$.memory.hicache_storage_backend_extra_config.dir: 'hicache_storage_backend_extra_config.dir' must not contain"
        " a NUL byte (got 'kv\\x00x') -- pass a plain directory path"
    ]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_failing_writes_mark_storage_degraded_until_they_succeed(serve, tmp_path: Path) -> None:
    """Writes to a directory that went away back off; /health and /server_info say degraded, then recover."""
    root = tmp_path / "kv"
    engine, client = serve()
    attach(client, root, hicache_write_policy="write_through")
    controller = engine.hicache.controller
    clock = Clock()
    controller.storage_backend.clock = clock  # the back-off follows this clock, step by step
    assert client.get("/health").json()["status"] == "ok"

    moved = tmp_path / "kv-moved"
    root.rename(moved)
    root.write_text("a file where the storage directory was")
    generate(client)
    generate(client)
    assert controller.wait_idle(30)
    health = client.get("/health")
    assert health.status_code == 200  # still serving: a storage miss costs a recompute
    body = health.json()
    assert body["status"] == "degraded"
    assert body["storage"]["degraded"] is True
    assert body["detail"].startswith(f"storage writes to the file backend in {root.resolve()} are failing (")
    info = client.get("/server_info").json()
    assert info["storage"]["degraded"] is True
    failed = info["stats"]["hicache"]["write_errors"]
    deferred = controller.storage_backend.stats.writes_deferred
    assert controller.storage_backend.stats.write_errors == 1 and deferred >= 1  # one try, the rest waited

    root.unlink()
    moved.rename(root)
    clock.now += 60.0
    r = client.post("/generate", json={"text": "a new prompt, so there are new pages to store", "max_new_tokens": 4})
    assert r.status_code == 200
    client.post("/generate", json={"text": "a new prompt, so there are new pages to store", "max_new_tokens": 4})
    assert controller.wait_idle(30)
    assert client.get("/health").json()["status"] == "ok"
    assert client.get("/server_info").json()["storage"]["degraded"] is False
    assert controller.stats.write_errors == failed
