"""Where the page MAC key comes from: a configured secret, or a key file kept in the storage directory.

A configured secret (`hicache_storage_mac_key`) is stretched to 32 bytes, so servers
given the same secret read each other's pages. Without one, the file backend keeps a
random key in `<dir>/.sgconf-mac-key`, created once with mode 0600: every process of
this user sharing the directory reads the same key, while another user who can write
pages into the directory (but not read the key) cannot make pages we accept. A key
file that others can read or write, or that another user owns, is refused: its key
would prove nothing.
"""

from __future__ import annotations

import errno
import hashlib
import os
import secrets
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from mem_cache.hicache.errors import StorageAttachError
from sgconf.redaction import REDACTED

KEY_FILE = ".sgconf-mac-key"
KEY_FIELD = "hicache_storage_mac_key"
KEY_BYTES = 32
MIN_SECRET_CHARS = 16


def key_from_secret(secret: str) -> bytes:
    """The 32-byte MAC key of a configured secret; raises StorageAttachError for a weak one (value never shown)."""
    if len(secret.strip()) < MIN_SECRET_CHARS:
        msg = (
            f"'{KEY_FIELD}' must hold at least {MIN_SECRET_CHARS} non-blank characters (got {len(secret.strip())})"
            f" -- use e.g. the output of `python -c 'import secrets; print(secrets.token_hex(32))'`"
        )
        raise StorageAttachError(msg, field=KEY_FIELD, value=REDACTED)
    return hashlib.sha256(b"sgconf-mackey\x00" + secret.encode("utf-8")).digest()


def random_key() -> bytes:
    """A fresh key for a tier that lives and dies with this process."""
    return secrets.token_bytes(KEY_BYTES)


def key_from_directory(root: Path) -> bytes:
    """Read `root/.sgconf-mac-key`, creating it (0600) when absent; raises StorageAttachError.

    The key is written whole to a private temp file first (`mkstemp` opens it with
    O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600), then linked to its name: the link never
    follows or replaces what is there, so it fails if another process got there first
    (we read theirs) or anything else holds the name (a symlink, a FIFO: refused by the
    read), and no reader ever sees a half-written key.
    """
    path = root / KEY_FILE
    if os.path.lexists(path):  # a dangling symlink too: refused by the read, not written through
        return _read_key_file(path)
    key = random_key()
    try:
        fd, tmp = tempfile.mkstemp(dir=root, prefix=f"{KEY_FILE}.", suffix=".tmp")
    except OSError as exc:
        raise _key_error(path, f"cannot create it: {(exc.strerror or str(exc)).lower()}") from None
    try:
        with os.fdopen(fd, "w") as f:  # mkstemp creates it 0600
            f.write(key.hex() + "\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return _read_key_file(path)  # another process created it first: use theirs
        except OSError as exc:
            raise _key_error(path, f"cannot create it: {(exc.strerror or str(exc)).lower()}") from None
    finally:
        _unlink_quietly(Path(tmp))
    return key


# how the key file is opened: never through a symlink (ELOOP), never waiting for a writer
# (a FIFO opens at once, then fstat refuses it), never inherited by a child process
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
# a hex key, a newline and some slack: a larger file is not ours, and is not read whole
_MAX_KEY_FILE_BYTES = 4 * KEY_BYTES


def _read_key_file(path: Path) -> bytes:
    """The key in `path`, which must be a regular file of this user's, closed to others.

    Anything else there (a FIFO, a device, a directory, a symlink) is refused without
    blocking on it, as is a file past `_MAX_KEY_FILE_BYTES`: a hostile or mistaken
    entry at the key's name must fail the attach, never stall the engine.
    """
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _key_error(path, "it is a symbolic link, not a regular file") from None
        raise _key_error(path, f"cannot open it: {(exc.strerror or str(exc)).lower()}") from None
    try:
        raw = _read_regular(fd, path)
    finally:
        os.close(fd)
    try:
        key = bytes.fromhex(raw.decode("ascii").strip()) if len(raw) <= _MAX_KEY_FILE_BYTES else b""
    except ValueError:  # UnicodeDecodeError is one too
        key = b""
    if len(key) != KEY_BYTES:
        # a writer killed between create and write leaves it empty; nothing was signed with it yet
        raise _key_error(path, f"it does not hold {KEY_BYTES} hex-encoded bytes")
    return key


def _read_regular(fd: int, path: Path) -> bytes:
    """At most `_MAX_KEY_FILE_BYTES` + 1 bytes of `fd`, once fstat shows a regular file of this user's, 0600."""
    try:
        st = os.fstat(fd)
    except OSError as exc:
        raise _key_error(path, f"cannot stat it: {(exc.strerror or str(exc)).lower()}") from None
    if not stat.S_ISREG(st.st_mode):
        raise _key_error(path, f"it is {_kind(st.st_mode)}, not a regular file")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise _key_error(path, f"it belongs to uid {st.st_uid}, not to this user")
    if st.st_mode & 0o077:
        raise _key_error(path, f"its mode is {st.st_mode & 0o777:o}, open to other users")
    if st.st_size > _MAX_KEY_FILE_BYTES:
        raise _key_error(path, f"it holds {st.st_size} bytes, more than a key's {_MAX_KEY_FILE_BYTES}")
    try:
        return os.read(fd, _MAX_KEY_FILE_BYTES + 1)
    except OSError as exc:
        raise _key_error(path, f"cannot read it: {(exc.strerror or str(exc)).lower()}") from None


_KINDS: tuple[tuple[Callable[[int], bool], str], ...] = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _kind(mode: int) -> str:
    """What a non-regular directory entry is, in words."""
    return next((word for test, word in _KINDS if test(mode)), "not a file")


def _key_error(path: Path, why: str) -> StorageAttachError:
    msg = (
        f"the page MAC key file {str(path)!r} cannot be used: {why}"
        f" -- remove it (pages signed with it become misses), chmod 600 it, or set {KEY_FIELD}"
    )
    return StorageAttachError(msg, field=KEY_FIELD, value=str(path))


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


__all__ = ["KEY_FIELD", "KEY_FILE", "key_from_directory", "key_from_secret", "random_key"]
