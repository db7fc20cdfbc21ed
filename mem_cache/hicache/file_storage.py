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

`dir`, given or defaulted, goes through `resolve_storage_dir`: `~` expanded, made
absolute, `..` and symbolic links resolved, NUL bytes refused; the resolved path is
what the backend uses and what its status shows. After that nothing in the directory is
trusted: every shard directory and page file is opened relative to the resolved root
without following symbolic links, so a link planted in the directory
cannot send a read or a write outside it (such an entry, or a FIFO or device where a
page belongs, is counted in `stats.unsafe_skipped`, removed and read as missing);
shard directories are created only under the opened root; a page file is read only up
to the size its layout allows (see `storage`). The page MAC key, unless configured,
lives in `<dir>/.sgconf-mac-key` (see `mac_key`).
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog

from mem_cache.hicache.errors import StorageAttachError
from mem_cache.hicache.mac_key import KEY_FILE, key_from_directory
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
# directories and page files are opened without following symbolic links; O_NONBLOCK so
# that a FIFO planted where a page belongs cannot block the reader on open
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK


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
        msg = f'cannot create the default storage directory {str(root)!r} ({exc.strerror}) -- pass {{"dir": "/path"}} or set {DIR_ENV}'
        raise StorageAttachError(msg, field=DIR_FIELD, value=str(root)) from None
    mine = not hasattr(os, "getuid") or st.st_uid == os.getuid()
    if not root.is_dir() or not mine or st.st_mode & 0o077:
        msg = (
            f"the default storage directory {str(root)!r} is not a private directory of this user "
            f'(mode {st.st_mode & 0o777:o}) -- pass {{"dir": "/path"}}, set {DIR_ENV}, or chmod 700 it'
        )
        raise StorageAttachError(msg, field=DIR_FIELD, value=str(root))


class FileStorage(StorageBase):
    """Pages as files under `root`; see the module docstring for the layout and guarantees."""

    name = "file"
    stored_key_source = "directory"

    def __init__(
        self,
        root: Path,
        *,
        fsync: bool = True,
        stale_temp_s: float = 600.0,
        created: Path | None = None,
        **base: Any,
    ) -> None:
        super().__init__(**base)
        self.root = root
        self.created = created  # the topmost directory opening created, removed by abandon()
        self.fsync = fsync
        self.stale_temp_s = stale_temp_s
        self._dirty_dirs: set[str] = set()
        self._dirs_lock = threading.Lock()
        self._sweep_temp_files()

    def path_for(self, key: str) -> Path:
        """The final file name of `key` (raises ValueError for a key unsafe as a file name)."""
        return self.root / key[:2] / _file_name(key)

    def stored_mac_key(self) -> bytes | None:
        return key_from_directory(self.root)

    def _location(self) -> dict[str, Any]:
        return {"dir": str(self.root)}

    def _read(self, key: str) -> bytes | None:
        name = _file_name(key)
        limit = self.read_limit(key)
        try:
            shard = self._open_shard(key[:2], create=False)
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("hicache.storage.read_failed", backend=self.name, key=key, error=str(exc))
            return None
        try:
            try:
                fd = os.open(name, _READ_FLAGS, dir_fd=shard)
            except FileNotFoundError:
                return None
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.EMLINK):  # a symbolic link where a page belongs
                    self._remove_unsafe(shard, name, "a symbolic link")
                else:
                    log.warning("hicache.storage.read_failed", backend=self.name, key=key, error=str(exc))
                return None
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    self._remove_unsafe(shard, name, "not a regular file")
                    return None
                want = st.st_size if limit is None else min(st.st_size, limit + 1)
                return _read_at_most(fd, want)
            except OSError as exc:
                log.warning("hicache.storage.read_failed", backend=self.name, key=key, error=str(exc))
                return None
            finally:
                os.close(fd)
        finally:
            os.close(shard)

    def _write(self, key: str, framed: bytes) -> None:
        name = _file_name(key)
        shard = self._open_shard(key[:2], create=True)
        try:
            tmp = f".{key}.{secrets.token_hex(6)}{TEMP_SUFFIX}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=shard)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(framed)
                    if self.fsync:
                        f.flush()
                        os.fsync(f.fileno())
                # a symbolic link at the final name is replaced, never followed
                os.replace(tmp, name, src_dir_fd=shard, dst_dir_fd=shard)
            except BaseException:
                try:
                    os.unlink(tmp, dir_fd=shard)
                except OSError:
                    pass
                raise
        finally:
            os.close(shard)
        if self.fsync:
            with self._dirs_lock:
                self._dirty_dirs.add(key[:2])

    def _has(self, key: str) -> bool:
        name = _file_name(key)
        try:
            shard = self._open_shard(key[:2], create=False)
        except OSError:
            return False
        try:
            return stat.S_ISREG(os.stat(name, dir_fd=shard, follow_symlinks=False).st_mode)
        except OSError:
            return False
        finally:
            os.close(shard)

    def _discard(self, key: str) -> None:
        name = _file_name(key)
        try:
            shard = self._open_shard(key[:2], create=False)
        except OSError:
            return
        try:
            os.unlink(name, dir_fd=shard)
        except OSError:
            pass
        finally:
            os.close(shard)

    def _open_shard(self, shard: str, *, create: bool) -> int:
        """A descriptor of the shard directory `shard` under the root, never through a symbolic link.

        A symbolic link where the shard directory belongs is counted and removed;
        then the shard reads as missing, or is created as a real directory when `create`.
        Raises FileNotFoundError when it is missing and not created, OSError otherwise.
        """
        # the root is the resolved path (no link in it); opened by name each time, so a
        # directory moved away or replaced reads as missing rather than being followed
        root = os.open(self.root, _DIR_FLAGS)
        try:
            try:
                return os.open(shard, _DIR_FLAGS, dir_fd=root)
            except FileNotFoundError:
                if not create:
                    raise
            except OSError as exc:
                # only a link is removed; a file there makes the write fail, as any unwritable spot does
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK) or not _is_link(shard, root):
                    raise
                self._remove_unsafe(root, shard, "a symbolic link")
                if not create:
                    raise FileNotFoundError(errno.ENOENT, "shard directory removed", shard) from None
            try:
                os.mkdir(shard, 0o700, dir_fd=root)
            except FileExistsError:
                pass  # another writer made it meanwhile; the open below still refuses a link
            return os.open(shard, _DIR_FLAGS, dir_fd=root)
        finally:
            os.close(root)

    def _remove_unsafe(self, dir_fd: int, name: str, what: str) -> None:
        """Count and remove an entry that is not what the layout puts there (unlink never follows a link)."""
        self._bump("unsafe_skipped")
        try:
            os.unlink(name, dir_fd=dir_fd)
        except OSError:
            pass
        self._warn_once(
            "hicache.storage.unsafe_entry",
            "unsafe_skipped",
            "unsafe entries",
            dir=str(self.root),
            entry=name,
            reason=what,
        )

    def _flush(self) -> None:
        # the renames are durable only once their directories are synced
        with self._dirs_lock:
            dirs, self._dirty_dirs = self._dirty_dirs, set()
        for shard in dirs:
            try:
                fd = self._open_shard(shard, create=False)
            except OSError:
                continue
            try:
                os.fsync(fd)
            except OSError:
                pass
            finally:
                os.close(fd)

    def _abandon(self) -> None:
        if self.created is None:
            return
        # this opening created the directory, so also the key file in it: nothing was signed with it
        try:
            (self.root / KEY_FILE).unlink()
        except OSError:
            pass
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
                    if now - entry.stat(follow_symlinks=False).st_mtime >= self.stale_temp_s:
                        os.unlink(entry.path)
                        removed += 1
                except OSError:
                    pass
        if found:
            self._bump("corrupt_skipped", found)
            log.warning("hicache.storage.leftover_temp_files", dir=str(self.root), found=found, removed=removed)


def _file_name(key: str) -> str:
    """The page file name of `key` inside its shard; raises ValueError for a key unsafe as a file name."""
    if not _KEY_RE.match(key) or len(key) > 200:
        msg = f"storage key {key!r} is not a safe file name -- use page_keys() to make keys"
        raise ValueError(msg)
    return f"{key}{SUFFIX}"


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _read_at_most(fd: int, n: int) -> bytes:
    chunks = []
    while n > 0:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def open_file_storage(extra_config: Mapping[str, Any]) -> FileStorage:
    """Factory for backend name `file`; raises StorageAttachError naming the bad option."""
    check_options("file", extra_config, OPTIONS)
    if "dir" not in extra_config:
        extra_config = {**extra_config, "dir": str(default_dir())}
    raw = extra_config["dir"]
    root = resolve_storage_dir(raw)
    fsync = extra_config.get("fsync", True)
    if not isinstance(fsync, bool):
        msg = f"'{EXTRA_CONFIG_FIELD}.fsync' must be true or false (got {fsync!r}) -- omit it to fsync every page"
        raise StorageAttachError(msg, field=f"{EXTRA_CONFIG_FIELD}.fsync", value=fsync)
    stale = extra_config.get("stale_temp_s", 600.0)
    if isinstance(stale, bool) or not isinstance(stale, int | float) or stale < 0:
        msg = f"'{EXTRA_CONFIG_FIELD}.stale_temp_s' must be a number >= 0 (got {stale!r}) -- omit it for 600 seconds"
        raise StorageAttachError(msg, field=f"{EXTRA_CONFIG_FIELD}.stale_temp_s", value=stale)
    if DIR_ENV not in os.environ and root == resolve_storage_dir(default_dir()):
        _prepare_default_dir(root)  # the shared temp dir: private to this user, or refused
    created = _check_writable(root, os.fspath(raw))
    return FileStorage(root, fsync=fsync, stale_temp_s=float(stale), created=created)


def resolve_storage_dir(raw: object) -> Path:
    """The directory a `dir` value names, made absolute with `~`, `..` and symlinks resolved.

    The one place a storage directory is checked, whether a user gave it or a default
    supplied it. Raises StorageAttachError naming the field for a value that is not a
    non-empty path string or that holds a NUL byte (no file system call could use it).
    """
    if isinstance(raw, os.PathLike):
        raw = os.fspath(raw)
    if not isinstance(raw, str) or not raw.strip():
        msg = f'\'{DIR_FIELD}\' must be a non-empty path string (got {raw!r}) -- pass {{"dir": "/path/to/cache"}}'
        raise StorageAttachError(msg, field=DIR_FIELD, value=raw)
    if "\x00" in raw:
        msg = f"'{DIR_FIELD}' must not contain a NUL byte (got {raw!r}) -- pass a plain directory path"
        raise StorageAttachError(msg, field=DIR_FIELD, value=raw)
    try:
        return Path(os.path.expanduser(raw)).resolve(strict=False)
    except (OSError, RuntimeError) as exc:  # a symlink loop
        msg = f"'{DIR_FIELD}' = {raw!r} cannot be resolved ({exc}) -- pass a directory path without a symlink loop"
        raise StorageAttachError(msg, field=DIR_FIELD, value=raw) from None


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


__all__ = ["DIR_ENV", "FileStorage", "default_dir", "open_file_storage", "resolve_storage_dir", "with_default_dir"]
