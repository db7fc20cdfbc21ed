"""The `file` storage backend: one file per page under a directory.

Layout: `<dir>/<key[:2]>/<key>.kvpage`, the two-character fan-out keeping
directories small. Writes are atomic: the framed page goes to a temp file in the
same directory (`.<key>.<random>.tmp`), is fsynced, then renamed over the final
name, so a reader sees either no page or a complete one. A process killed mid-write
leaves only a temp file; those are counted in `stats.corrupt_skipped` when the
directory is opened and removed once older than `stale_temp_s` (another process
may still be writing a fresh one). Damaged page files (torn, truncated, flipped
bytes) fail the checksum, are counted, removed and read as missing. (Processes sharing
a directory may race here: a page rewritten between the failed read and the removal
is lost too. That costs a recompute, never a wrong page.)

Options (`hicache_storage_backend_extra_config`): `dir`, `fsync` (default true; false
trades durability for speed, e.g. on tmpfs), `stale_temp_s` (default 600).

Without `dir` the pages go to `$SGCONF_HICACHE_FILE_DIR` when that is set, else to
`sgconf-hicache-<uid>` under the system temp directory (`tempfile.gettempdir()`),
created with mode 0700. A default directory that exists already must be a directory
owned by this user and closed to others, or it is refused: pages read back from a
directory anyone can write would be trusted KV.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog

from mem_cache.hicache.errors import StorageAttachError
from mem_cache.hicache.storage import (
    EXTRA_CONFIG_FIELD,
    StorageBase,
    check_options,
)

log = structlog.get_logger("mem_cache.hicache.file_storage")

OPTIONS = ("dir", "fsync", "stale_temp_s")
SUFFIX = ".kvpage"
TEMP_SUFFIX = ".tmp"
_KEY_RE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z_.-]*$")
DIR_FIELD = f"{EXTRA_CONFIG_FIELD}.dir"
DIR_ENV = "SGCONF_HICACHE_FILE_DIR"


def default_dir(env: Mapping[str, str] | None = None) -> Path:
    """The directory used when no `dir` is given: `$SGCONF_HICACHE_FILE_DIR`, else one under the temp dir."""
    env = os.environ if env is None else env
    given = env.get(DIR_ENV, "").strip()
    if given:
        return Path(os.path.expanduser(given)).absolute()
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"sgconf-hicache-{uid}"


def with_default_dir(backend: str | None, extra_config: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """`extra_config` with the default `dir` filled in for the file backend (unchanged otherwise).

    Attach calls this before validating, so the override records the directory in use and
    `/server_info` and the storage status show it.
    """
    if backend != "file" or (extra_config is not None and "dir" in extra_config):
        return None if extra_config is None else dict(extra_config)
    return {**(extra_config or {}), "dir": str(default_dir())}


def _prepare_default_dir(root: Path) -> None:
    """Create the default directory 0700, or check that the existing one is ours and private."""
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = root.stat()
    except OSError as exc:
        msg = f"cannot create the default storage directory {str(root)!r} ({exc.strerror}) -- pass {{\"dir\": \"/path\"}} or set {DIR_ENV}"
        raise StorageAttachError(msg, field=DIR_FIELD, value=str(root)) from None
    mine = not hasattr(os, "getuid") or st.st_uid == os.getuid()
    if not root.is_dir() or not mine or st.st_mode & 0o077:
        msg = (
            f"the default storage directory {str(root)!r} is not a private directory of this user "
            f"(mode {st.st_mode & 0o777:o}) -- pass {{\"dir\": \"/path\"}}, set {DIR_ENV}, or chmod 700 it"
        )
        raise StorageAttachError(msg, field=DIR_FIELD, value=str(root))


class FileStorage(StorageBase):
    """Pages as files under `root`; see the module docstring for the layout and guarantees."""

    name = "file"

    def __init__(
        self, root: Path, *, fsync: bool = True, stale_temp_s: float = 600.0, created: Path | None = None
    ) -> None:
        super().__init__()
        self.root = root
        self.created = created  # the topmost directory opening created, removed by abandon()
        self.fsync = fsync
        self.stale_temp_s = stale_temp_s
        self._dirty_dirs: set[Path] = set()
        self._dirs_lock = threading.Lock()
        self._sweep_temp_files()

    def path_for(self, key: str) -> Path:
        """The final file name of `key` (raises ValueError for a key unsafe as a file name)."""
        if not _KEY_RE.match(key) or len(key) > 200:
            msg = f"storage key {key!r} is not a safe file name -- use page_keys() to make keys"
            raise ValueError(msg)
        return self.root / key[:2] / f"{key}{SUFFIX}"

    def _read(self, key: str) -> bytes | None:
        try:
            return self.path_for(key).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("hicache.storage.read_failed", backend=self.name, key=key, error=str(exc))
            return None

    def _write(self, key: str, framed: bytes) -> None:
        final = self.path_for(key)
        final.parent.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=final.parent, prefix=f".{key}.", suffix=TEMP_SUFFIX)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(framed)
                if self.fsync:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, final)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        if self.fsync:
            with self._dirs_lock:
                self._dirty_dirs.add(final.parent)

    def _has(self, key: str) -> bool:
        return self.path_for(key).is_file()

    def _discard(self, key: str) -> None:
        try:
            self.path_for(key).unlink()
        except OSError:
            pass

    def _flush(self) -> None:
        # the renames are durable only once their directories are synced
        with self._dirs_lock:
            dirs, self._dirty_dirs = self._dirty_dirs, set()
        for d in dirs:
            _fsync_dir(d)

    def _abandon(self) -> None:
        if self.created is None:
            return
        # rmdir, never rmtree: only directories left empty are removed
        for d in (self.root, *self.root.parents):
            try:
                d.rmdir()
            except OSError:
                return
            if d == self.created:
                return

    def _sweep_temp_files(self) -> None:
        now = time.time()
        found = removed = 0
        for sub in _scandir(self.root):
            if not sub.is_dir(follow_symlinks=False):
                continue
            for entry in _scandir(Path(sub.path)):
                if not entry.name.endswith(TEMP_SUFFIX):
                    continue
                found += 1
                try:
                    if now - entry.stat().st_mtime >= self.stale_temp_s:
                        os.unlink(entry.path)
                        removed += 1
                except OSError:
                    pass
        if found:
            self._bump("corrupt_skipped", found)
            log.warning("hicache.storage.leftover_temp_files", dir=str(self.root), found=found, removed=removed)


def open_file_storage(extra_config: Mapping[str, Any]) -> FileStorage:
    """Factory for backend name `file`; raises StorageAttachError naming the bad option."""
    check_options("file", extra_config, OPTIONS)
    if "dir" not in extra_config:
        extra_config = {**extra_config, "dir": str(default_dir())}
    raw = extra_config["dir"]
    if not isinstance(raw, str | os.PathLike) or not str(raw).strip():
        msg = f"'{DIR_FIELD}' must be a non-empty path string (got {raw!r}) -- pass {{\"dir\": \"/path/to/cache\"}}"
        raise StorageAttachError(msg, field=DIR_FIELD, value=raw)
    fsync = extra_config.get("fsync", True)
    if not isinstance(fsync, bool):
        msg = f"'{EXTRA_CONFIG_FIELD}.fsync' must be true or false (got {fsync!r}) -- omit it to fsync every page"
        raise StorageAttachError(msg, field=f"{EXTRA_CONFIG_FIELD}.fsync", value=fsync)
    stale = extra_config.get("stale_temp_s", 600.0)
    if isinstance(stale, bool) or not isinstance(stale, int | float) or stale < 0:
        msg = f"'{EXTRA_CONFIG_FIELD}.stale_temp_s' must be a number >= 0 (got {stale!r}) -- omit it for 600 seconds"
        raise StorageAttachError(msg, field=f"{EXTRA_CONFIG_FIELD}.stale_temp_s", value=stale)
    root = Path(os.path.expanduser(os.fspath(raw))).absolute()
    if DIR_ENV not in os.environ and root == default_dir():
        _prepare_default_dir(root)  # the shared temp dir: private to this user, or refused
    created = _check_writable(root, os.fspath(raw))
    return FileStorage(root, fsync=fsync, stale_temp_s=float(stale), created=created)


def _check_writable(root: Path, raw: str) -> Path | None:
    """Create `root` if needed and prove it writable; returns the topmost directory created.

    On failure, directories this call created are removed again.
    """
    created = None
    for d in (root, *root.parents):
        if d.exists():
            break
        created = d
    try:
        _probe(root, raw)
    except StorageAttachError:
        if created is not None:
            for d in (root, *root.parents):
                try:
                    d.rmdir()
                except OSError:
                    break
                if d == created:
                    break
        raise
    return created


def _probe(root: Path, raw: str) -> None:
    if root.exists() and not root.is_dir():
        msg = f"'{DIR_FIELD}' = {raw!r} exists and is not a directory -- pick a directory path"
        raise StorageAttachError(msg, field=DIR_FIELD, value=raw)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        msg = f"cannot create the storage directory '{DIR_FIELD}' = {raw!r}: {reason.lower()} -- pick a writable directory"
        raise StorageAttachError(msg, field=DIR_FIELD, value=raw) from exc
    if not root.is_dir():
        msg = f"'{DIR_FIELD}' = {raw!r} exists and is not a directory -- pick a directory path"
        raise StorageAttachError(msg, field=DIR_FIELD, value=raw)
    try:
        fd, probe = tempfile.mkstemp(dir=root, prefix=".probe.", suffix=".check")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        msg = f"cannot write to the storage directory '{DIR_FIELD}' = {raw!r}: {reason.lower()} -- pick a writable directory"
        raise StorageAttachError(msg, field=DIR_FIELD, value=raw) from exc


def _scandir(path: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as it:
            return list(it)
    except OSError:
        return []


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


__all__ = ["DIR_ENV", "FileStorage", "default_dir", "open_file_storage", "with_default_dir"]
