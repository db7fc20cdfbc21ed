"""Storage backends: the factory's errors, the file backend's atomic, checked pages, the memory backend."""

from __future__ import annotations

import os
import time

import pytest

from mem_cache.hicache import MemoryStorage, StorageAttachError, create_storage_backend
from mem_cache.hicache.file_storage import FileStorage
from mem_cache.hicache.mac_key import KEY_FILE
from mem_cache.hicache.memory_storage import clear_shared_stores

KEY = "ab" + "0" * 62
KEY2 = "cd" + "1" * 62


@pytest.fixture
def store(tmp_path):
    backend = create_storage_backend("file", {"dir": str(tmp_path / "pages")})
    yield backend
    backend.close()


def test_unknown_backend_names_the_field_and_the_choices():
    """An unknown name is refused with the known names and a suggestion."""
    with pytest.raises(StorageAttachError) as exc:
        create_storage_backend("fiel", {})
    assert str(exc.value) == (
        "unknown storage backend 'fiel' for 'hicache_storage_backend' -- use one of file, memory; did you mean 'file'?"
    )
    assert exc.value.field == "hicache_storage_backend"
    assert isinstance(exc.value, OSError)


def test_file_backend_without_dir_uses_a_private_dir_under_the_temp_dir(tmp_path, monkeypatch):
    """No dir and no SGCONF_HICACHE_FILE_DIR: sgconf-hicache-<uid> under the system temp dir, created 0700."""
    import tempfile

    monkeypatch.delenv("SGCONF_HICACHE_FILE_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    backend = create_storage_backend("file", {})
    root = tmp_path / f"sgconf-hicache-{os.getuid()}"
    assert backend.root == root
    assert root.is_dir() and root.stat().st_mode & 0o777 == 0o700
    backend.close()


def test_default_dir_open_to_others_is_refused(tmp_path, monkeypatch):
    """A default dir that already exists with group/other access is refused, naming the fix."""
    import tempfile

    monkeypatch.delenv("SGCONF_HICACHE_FILE_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    root = tmp_path / f"sgconf-hicache-{os.getuid()}"
    root.mkdir(mode=0o755)
    root.chmod(0o755)
    with pytest.raises(StorageAttachError) as exc:
        create_storage_backend("file", {})
    assert str(exc.value) == (
        f"the default storage directory {str(root)!r} is not a private directory of this user (mode 755)"
        ' -- pass {"dir": "/path"}, set SGCONF_HICACHE_FILE_DIR, or chmod 700 it'
    )
    assert exc.value.field == "hicache_storage_backend_extra_config.dir"


def test_file_backend_dir_from_the_environment(tmp_path, monkeypatch):
    """SGCONF_HICACHE_FILE_DIR names the default dir; with_default_dir records it for the override."""
    from mem_cache.hicache.file_storage import with_default_dir

    monkeypatch.setenv("SGCONF_HICACHE_FILE_DIR", str(tmp_path / "kv"))
    backend = create_storage_backend("file", {"fsync": False})
    assert backend.root == tmp_path / "kv"
    backend.close()
    assert with_default_dir("file", None) == {"dir": str(tmp_path / "kv")}
    assert with_default_dir("file", {"dir": "/x"}) == {"dir": "/x"}
    assert with_default_dir("memory", None) is None


def test_dir_that_cannot_be_created_is_refused_and_nothing_is_created(tmp_path):
    """A dir below a regular file cannot be created; the error names field and value."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    target = blocker / "sub"
    with pytest.raises(StorageAttachError) as exc:
        create_storage_backend("file", {"dir": str(target)})
    assert str(exc.value) == (
        f"cannot create the storage directory 'hicache_storage_backend_extra_config.dir' = {str(target)!r}:"
        " not a directory -- pick a writable directory"
    )
    assert exc.value.value == str(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_dir_that_is_a_file_is_refused(tmp_path):
    """An existing regular file is not a directory."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StorageAttachError, match="exists and is not a directory -- pick a directory path$"):
        create_storage_backend("file", {"dir": str(blocker)})


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only directories")
def test_read_only_dir_is_refused(tmp_path):
    """A directory without write permission is refused at open."""
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    with pytest.raises(StorageAttachError, match="cannot write to the storage directory"):
        create_storage_backend("file", {"dir": str(ro)})


@pytest.mark.parametrize(
    ("options", "field", "message"),
    [
        ({"dri": "/x"}, "hicache_storage_backend_extra_config.dri", "unknown option 'dri'"),
        ({"dir": ""}, "hicache_storage_backend_extra_config.dir", "must be a non-empty path string"),
        ({"dir": 5}, "hicache_storage_backend_extra_config.dir", "must be a non-empty path string"),
        ({"dir": "/tmp", "fsync": "yes"}, "hicache_storage_backend_extra_config.fsync", "must be true or false"),
        ({"dir": "/tmp", "stale_temp_s": -1}, "hicache_storage_backend_extra_config.stale_temp_s", ">= 0"),
    ],
)
def test_bad_file_options_name_their_field(options, field, message):
    """Every bad option is one StorageAttachError naming the leaf."""
    with pytest.raises(StorageAttachError) as exc:
        create_storage_backend("file", options)
    assert exc.value.field == field
    assert message in str(exc.value)


def test_unknown_option_suggests_the_right_one():
    """A misspelt option gets a did-you-mean."""
    with pytest.raises(StorageAttachError) as exc:
        create_storage_backend("file", {"dri": "/x"})
    assert str(exc.value) == (
        "unknown option 'dri' in 'hicache_storage_backend_extra_config' for the file backend"
        " -- known options: dir, fsync, stale_temp_s; did you mean 'dir'?"
    )


def test_extra_config_must_be_a_mapping():
    """A list is not an options object."""
    with pytest.raises(StorageAttachError, match=r"expected an object, got \['dir'\] -- pass an object like") as info:
        create_storage_backend("memory", ["dir"])  # type: ignore[arg-type]
    assert info.value.field == "hicache_storage_backend_extra_config"


def test_file_put_get_round_trip_and_layout(store):
    """A page lands at <dir>/<key[:2]>/<key>.kvpage with no temp file left."""
    assert store.get(KEY) is None
    assert store.put(KEY, b"kv-bytes") is True
    assert store.exists(KEY)
    assert store.get(KEY) == b"kv-bytes"
    page_dir = store.root / "ab"
    assert [p.name for p in page_dir.iterdir()] == [f"{KEY}.kvpage"]
    s = store.stats
    assert (s.gets, s.hits, s.misses, s.puts, s.bytes_written, s.bytes_read) == (2, 1, 1, 1, 8, 8)


def test_second_put_of_a_key_is_skipped(store):
    """Keys name a prefix, so an existing page is not rewritten."""
    store.put(KEY, b"a")
    assert store.put(KEY, b"a") is True
    assert (store.stats.puts, store.stats.puts_skipped) == (1, 1)


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda b: b[: len(b) // 2], id="truncated"),
        pytest.param(lambda b: b[:-3] + bytes([b[-3] ^ 0xFF]) + b[-2:], id="flipped"),
        pytest.param(lambda b: b"", id="empty"),
        pytest.param(lambda b: b"\x00" * len(b), id="zeroed"),
    ],
)
def test_damaged_page_is_skipped_counted_and_removed(store, damage):
    """A damaged file reads as missing, counts once, and is deleted so it can be rewritten."""
    store.put(KEY, b"0123456789" * 10)
    path = store.path_for(KEY)
    path.write_bytes(damage(path.read_bytes()))
    assert store.get(KEY) is None
    assert store.stats.corrupt_skipped == 1
    assert not path.exists()
    assert store.get(KEY) is None
    assert store.stats.corrupt_skipped == 1
    assert store.put(KEY, b"fresh") is True
    assert store.get(KEY) == b"fresh"


def test_leftover_temp_files_are_counted_and_stale_ones_removed(tmp_path):
    """Temp files from a killed writer are counted at open; only stale ones are deleted."""
    root = tmp_path / "pages"
    (root / "ab").mkdir(parents=True)
    fresh = root / "ab" / f".{KEY}.x1.tmp"
    stale = root / "ab" / f".{KEY2}.x2.tmp"
    fresh.write_bytes(b"SGKV partial")
    stale.write_bytes(b"SGKV partial")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    backend = create_storage_backend("file", {"dir": str(root), "stale_temp_s": 60})
    assert backend.stats.corrupt_skipped == 2
    assert fresh.exists() and not stale.exists()
    assert backend.get(KEY) is None and backend.get(KEY2) is None
    backend.close()


def test_unsafe_key_is_refused(store):
    """A key that could escape the directory is a ValueError."""
    with pytest.raises(ValueError, match="is not a safe file name"):
        store.put("../evil", b"x")


def test_closed_backend_reads_empty_and_refuses_writes(store):
    """After close, get is None and put returns False."""
    store.put(KEY, b"x")
    store.close()
    store.close()
    assert store.get(KEY) is None
    assert store.put(KEY2, b"y") is False
    assert not store.exists(KEY)


def test_abandon_removes_the_directories_opening_created(tmp_path):
    """An unused backend removes the new directory chain, never a pre-existing one."""
    backend = create_storage_backend("file", {"dir": str(tmp_path / "a" / "b")})
    assert isinstance(backend, FileStorage)
    backend.abandon()
    assert list(tmp_path.iterdir()) == []
    existing = create_storage_backend("file", {"dir": str(tmp_path)})
    existing.abandon()
    assert tmp_path.is_dir()


def test_abandon_keeps_a_directory_with_pages(tmp_path):
    """A backend that wrote pages keeps them."""
    backend = create_storage_backend("file", {"dir": str(tmp_path / "a")})
    backend.put(KEY, b"x")
    backend.abandon()
    assert (tmp_path / "a" / "ab" / f"{KEY}.kvpage").is_file()


def test_memory_backend_shares_named_stores():
    """Two memory backends with the same store name see the same pages."""
    clear_shared_stores()
    a = create_storage_backend("memory", {"store": "t"})
    b = create_storage_backend("memory", {"store": "t"})
    c = create_storage_backend("memory", {})
    a.put(KEY, b"x")
    assert b.get(KEY) == b"x"
    assert c.get(KEY) is None
    clear_shared_stores()


def test_memory_backend_detects_damage_like_files():
    """Pages in memory are framed, so damage is detected the same way."""
    m = MemoryStorage()
    m.put(KEY, b"payload")
    m.pages[KEY] = m.pages[KEY][:-1]
    assert m.get(KEY) is None
    assert m.stats.corrupt_skipped == 1
    assert KEY not in m.pages


def test_bad_memory_store_name():
    """The store option must be a non-empty string."""
    with pytest.raises(StorageAttachError) as exc:
        create_storage_backend("memory", {"store": 3})
    assert exc.value.field == "hicache_storage_backend_extra_config.store"


WRITER = """
import os, sys
from mem_cache.hicache import create_storage_backend
backend = create_storage_backend("file", {"dir": sys.argv[1]})
payload = os.urandom(1 << 20)
print("ready", flush=True)
i = 0
while True:
    backend.put(f"{i:064x}", payload)
    i += 1
"""


@pytest.mark.slow  # starts a process: `make test-fast` leaves it out
def test_writer_killed_mid_write_leaves_only_whole_pages(tmp_path):
    """After SIGKILL of a writing process, every page file is whole; leftovers are only temp files."""
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        lines = iter(proc.stdout.readline, "")
        assert any(line.strip() == "ready" for line in lines)  # log lines may come first
        deadline = time.monotonic() + 30
        while len(list(tmp_path.glob("*/*.kvpage"))) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    pages = sorted(tmp_path.glob("*/*.kvpage"))
    temps = list(tmp_path.glob("*/*.tmp"))
    assert len(pages) >= 5
    backend = create_storage_backend("file", {"dir": str(tmp_path), "stale_temp_s": 0})
    assert backend.stats.corrupt_skipped == len(temps)
    for page in pages:
        assert backend.get(page.name.removesuffix(".kvpage")) is not None
    assert backend.stats.corrupt_skipped == len(temps)
    assert list(tmp_path.glob("*/*.tmp")) == []
    backend.close()


def test_forged_page_is_a_miss_counted_and_logged_once(store):
    """Pages re-signed by someone without the key are misses, removed, counted each, logged once."""
    from structlog.testing import capture_logs

    from mem_cache.hicache import PageCodec

    forger = PageCodec(bytes(32))  # write access to the directory, but not the key
    for key in (KEY, KEY2):
        path = store.path_for(key)
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(forger.encode(key, b"evil"))
    with capture_logs() as logs:
        assert store.get(KEY) is None
        assert store.get(KEY2) is None
    assert (store.stats.forged_skipped, store.stats.corrupt_skipped, store.stats.misses) == (2, 0, 2)
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == ["hicache.storage.forged_page"]
    assert not store.path_for(KEY).exists()
    assert store.put(KEY, b"good") and store.get(KEY) == b"good"


def test_page_swapped_to_another_key_is_forged(store):
    """A valid page copied under another key's name is refused, not served as that prefix."""
    store.put(KEY, b"page of KEY")
    target = store.path_for(KEY2)
    target.parent.mkdir(exist_ok=True)
    target.write_bytes(store.path_for(KEY).read_bytes())
    assert store.get(KEY2) is None
    assert store.stats.forged_skipped == 1
    assert store.get(KEY) == b"page of KEY"


def test_pages_are_shared_by_key_file_or_by_secret(tmp_path):
    """Two openings of one directory share its key file; a configured secret must match to read."""
    a = create_storage_backend("file", {"dir": str(tmp_path)})
    a.put(KEY, b"shared")
    b = create_storage_backend("file", {"dir": str(tmp_path)})
    assert b.get(KEY) == b"shared"
    assert b.describe()["mac_key_source"] == "directory"
    secret = create_storage_backend("file", {"dir": str(tmp_path)}, mac_secret="a long enough secret")
    assert secret.get(KEY) is None and secret.stats.forged_skipped == 1
    assert secret.describe()["mac_key_source"] == "setting"


def test_weak_secret_creates_nothing(tmp_path):
    """A too-short secret is refused before the directory is created."""
    with pytest.raises(StorageAttachError, match="'hicache_storage_mac_key' must hold at least 16"):
        create_storage_backend("file", {"dir": str(tmp_path / "new")}, mac_secret="short")
    assert list(tmp_path.iterdir()) == []


def test_dir_is_normalised_and_shown_resolved(tmp_path):
    """`..` and symlinks resolve; the status shows the resolved path."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    backend = create_storage_backend("file", {"dir": f"{tmp_path}/x/../link/./kv"})
    assert backend.root == (tmp_path / "real" / "kv").resolve()
    assert backend.describe()["dir"] == str((tmp_path / "real" / "kv").resolve())
    assert not (tmp_path / "x").exists()


def test_dir_with_a_nul_byte_is_refused(tmp_path):
    """A NUL byte can name no file: refused with the field, nothing created."""
    with pytest.raises(StorageAttachError) as exc:
        create_storage_backend("file", {"dir": f"{tmp_path}/a\x00b"})
    assert str(exc.value) == (
        f"'hicache_storage_backend_extra_config.dir' must not contain a NUL byte (got {f'{tmp_path}/a' + chr(0) + 'b'!r})"
        " -- pass a plain directory path"
    )
    assert list(tmp_path.iterdir()) == []


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_failed_writes_back_off_log_once_and_recover(tmp_path):
    """A tier whose writes fail is degraded: retried at 0.5, 1, 2 ... s (capped), one warning, then recovered."""
    from structlog.testing import capture_logs

    from mem_cache.hicache.file_storage import FileStorage

    clock = Clock()
    root = tmp_path / "pages"
    root.mkdir()
    store = FileStorage(root, fsync=False, clock=clock, backoff_base_s=0.5, backoff_cap_s=2.0)
    blocker = root / KEY[:2]
    blocker.write_text("a file where the fan-out directory goes: every write there fails")
    tried = []
    with capture_logs() as logs:
        for _ in range(40):  # 10 s in steps of 0.25 s
            before = store.stats.write_errors
            assert store.put(KEY, b"x") is False
            if store.stats.write_errors > before:
                tried.append(clock.now - 100.0)
            clock.now += 0.25
    assert tried == [0.0, 0.5, 1.5, 3.5, 5.5, 7.5, 9.5]  # delays 0.5, 1, 2, then capped at 2
    assert store.degraded
    health = store.describe()
    assert (health["degraded"], health["failed_writes_in_a_row"]) == (True, 7)
    assert "Not a directory" in health["last_error"] or "File exists" in health["last_error"]
    assert store.stats.writes_deferred == 40 - 7
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == ["hicache.storage.degraded"]

    blocker.unlink()
    clock.now += 2.0
    with capture_logs() as logs:
        assert store.put(KEY, b"x") is True
    assert not store.degraded
    assert store.describe()["degraded"] is False
    assert [(e["event"], e["failed_writes_in_a_row"]) for e in logs if e["log_level"] == "info"] == [
        ("hicache.storage.recovered", 7)
    ]


# -- nothing on disk is trusted: sizes, links, special files ------------------------------

PAGE = b"k" * 96  # the payload of one page in the tests below


def _bytes_read_by(monkeypatch) -> list[int]:
    """Record the size of every os.read the file backend makes."""
    import mem_cache.hicache.file_storage as fs

    sizes: list[int] = []
    real = os.read

    def spy(fd: int, n: int) -> bytes:
        data = real(fd, n)
        sizes.append(len(data))
        return data

    monkeypatch.setattr(fs.os, "read", spy)
    return sizes


def test_a_page_larger_than_the_layout_allows_is_a_miss_read_no_further(store, monkeypatch):
    """A 256 MiB sparse file under a page's name: one bounded read, counted, removed; a rewrite works."""
    from mem_cache.hicache.page_codec import HEADER_SIZE

    store.bound_pages(len(PAGE))
    assert store.put(KEY, PAGE) and store.get(KEY) == PAGE
    path = store.path_for(KEY)
    with open(path, "r+b") as f:
        f.truncate(256 << 20)
    sizes = _bytes_read_by(monkeypatch)
    assert store.get(KEY) is None
    limit = HEADER_SIZE + len(KEY) + len(PAGE)
    assert sum(sizes) == limit + 1
    s = store.stats
    assert (s.oversized_skipped, s.corrupt_skipped, s.misses) == (1, 0, 1)
    assert not path.exists()
    monkeypatch.undo()
    assert store.put(KEY, PAGE) and store.get(KEY) == PAGE


def test_a_page_of_exactly_the_bound_is_read(store):
    """The bound is one framed page of the layout's size: a full page passes, one byte more does not."""
    store.bound_pages(len(PAGE))
    assert store.put(KEY, PAGE) and store.get(KEY) == PAGE
    assert store.put(KEY2, PAGE + b"x") is True  # a writer with another layout
    assert store.get(KEY2) is None
    assert store.stats.oversized_skipped == 1


def test_memory_backend_bounds_pages_the_same_way():
    """The bound lives in the base class: the memory backend drops an oversized page too."""
    m = MemoryStorage()
    m.bound_pages(len(PAGE))
    m.put(KEY, PAGE * 2)
    assert m.get(KEY) is None
    assert m.stats.oversized_skipped == 1 and KEY not in m.pages


def test_a_page_file_that_is_a_link_is_never_followed(store, tmp_path):
    """A link to a valid page elsewhere reads as missing, is counted and removed; its target stays."""
    outside = create_storage_backend("file", {"dir": str(tmp_path / "outside")})
    outside.use_mac_key(store.codec.mac_key, source="test")  # the target would even authenticate
    outside.put(KEY, PAGE)
    target = outside.path_for(KEY)
    link = store.path_for(KEY)
    link.parent.mkdir(parents=True)
    link.symlink_to(target)
    assert store.exists(KEY) is False
    assert store.get(KEY) is None
    assert store.stats.unsafe_skipped == 1
    assert not link.is_symlink() and target.is_file()
    outside.close()


def test_a_shard_dir_that_is_a_link_is_replaced_and_nothing_lands_outside(store, tmp_path):
    """Writes never go through a linked shard directory: the link is removed, a real directory made."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shard = store.root / KEY[:2]
    shard.symlink_to(outside, target_is_directory=True)
    assert store.get(KEY) is None  # reading through the link: refused, link removed
    assert not shard.exists()
    shard.symlink_to(outside, target_is_directory=True)
    assert store.put(KEY, PAGE) is True
    assert list(outside.iterdir()) == []
    assert shard.is_dir() and not shard.is_symlink()
    assert store.get(KEY) == PAGE
    assert store.stats.unsafe_skipped == 2


def test_a_fifo_where_a_page_belongs_does_not_block_the_reader(store):
    """A special file under a page's name is a miss at once (opened non-blocking), counted and removed."""
    path = store.path_for(KEY)
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    assert store.get(KEY) is None
    assert store.stats.unsafe_skipped == 1 and not path.exists()


def test_the_controller_bounds_pages_by_its_layout(tmp_path):
    """An attached backend reads at most one page of the pool's layout."""
    from mem_cache.hicache import HiCacheController
    from mem_cache.pools import MHATokenToKVPool

    pool = MHATokenToKVPool(16, 4, "float32", 2, 4, layer_ids=(0, 1))
    controller = HiCacheController(pool, pin_memory=False)
    try:
        controller.attach_storage_backend("file", {"dir": str(tmp_path)})
        backend = controller.storage_backend
        assert backend is not None and backend.page_bytes == controller.layout.page_bytes == 4 * 2 * (2 * 4 * 2) * 4
    finally:
        controller.close()


def _key_entry(tmp_path, make) -> tuple:
    """A storage directory whose MAC key file's name holds what `make(path)` puts there."""
    root = tmp_path / "pages"
    root.mkdir()
    path = root / KEY_FILE
    make(path)
    return root, path


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (os.mkfifo, "it is a FIFO, not a regular file"),
        (os.mkdir, "it is a directory, not a regular file"),
        (lambda p: p.symlink_to(p.parent.parent / "elsewhere"), "it is a symbolic link, not a regular file"),
        (lambda p: p.symlink_to(_good_key_file(p.parent.parent)), "it is a symbolic link, not a regular file"),
        (lambda p: (p.write_bytes(b"0" * 4096), p.chmod(0o600)), "it holds 4096 bytes, more than a key's 128"),
        (lambda p: (p.write_bytes(b"\xff" * 64), p.chmod(0o600)), "it does not hold 32 hex-encoded bytes"),
    ],
    ids=["fifo", "directory", "dangling_symlink", "symlink_to_a_key", "oversized", "not_text"],
)
def test_a_key_file_that_is_not_a_regular_file_of_ours_refuses_the_attach(tmp_path, make, why):
    """A FIFO (opened non-blocking, so the attach does not wait for a writer), a symlink or a directory at the
    key's name is the attach's usual refusal naming the path; nothing is written through a link."""
    root, path = _key_entry(tmp_path, make)
    with pytest.raises(StorageAttachError) as exc:
        create_storage_backend("file", {"dir": str(root)})
    assert str(exc.value).startswith(f"the page MAC key file {str(path)!r} cannot be used: {why} -- ")
    assert exc.value.field == "hicache_storage_mac_key"
    assert not (tmp_path / "elsewhere").exists()
    assert sorted(p.name for p in root.iterdir()) == [KEY_FILE]  # no temp file left behind


def _good_key_file(where):
    target = where / "real-key"
    target.write_text("ab" * 32 + "\n")
    target.chmod(0o600)
    return target
