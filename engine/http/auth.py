"""Bearer-key checks for the inference routes (`api_key`) and the admin routes (`admin_api_key`).

Keys are read from the serving bag on every request, so an override of a key is
effective at once. The admin key may instead live in `admin_api_key_file`: it is read
at start-up and again whenever the file changes (so a key can be rotated without a
restart), and it never appears in the process's command line.

The token is compared byte for byte with the key, in constant time, exactly as it was
sent: nothing is stripped, so a header of `Bearer` followed by a Unicode space never
reduces to an empty key or to a prefix of the real one. Only the scheme is matched
without regard to case, as HTTP asks.
"""

from __future__ import annotations

import hmac
import os
import threading

import attrs
from fastapi import Request

from engine.http.errors import KeyFileError  # declared there; re-exported for existing imports
from engine.http.problems import HTTPProblem
from runtime.serving import get_serving


@attrs.frozen(slots=True)
class _Stamp:
    path: str
    mtime_ns: int
    size: int


class KeyFile:
    """The key held in one file, re-read when the file's size or modification time changes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stamp: _Stamp | None = None
        self._key = b""

    def read(self, path: str) -> bytes:
        """The key bytes (one trailing newline dropped); raises KeyFileError naming the file."""
        try:
            st = os.stat(path)
        except OSError as exc:
            raise KeyFileError(
                f"cannot read the admin key file {path!r} ({exc.strerror}) -- check admin_api_key_file"
            ) from None
        stamp = _Stamp(path, st.st_mtime_ns, st.st_size)
        with self._lock:
            if stamp == self._stamp:
                return self._key
            try:
                with open(path, "rb") as f:
                    raw = f.read(64 << 10)
            except OSError as exc:
                msg = f"cannot read the admin key file {path!r} ({exc.strerror}) -- check admin_api_key_file"
                raise KeyFileError(msg) from None
            key = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1] if raw.endswith(b"\n") else raw
            try:
                blank = not key.decode("utf-8").strip()
            except UnicodeDecodeError:
                raise KeyFileError(f"the admin key file {path!r} is not UTF-8 text -- write the key as text") from None
            if blank:
                raise KeyFileError(f"the admin key file {path!r} is empty or only whitespace -- write a key into it")
            self._stamp, self._key = stamp, key
            return key


KEY_FILE = KeyFile()


def admin_key() -> bytes | None:
    """The admin key in force (from admin_api_key or admin_api_key_file), or None when there is none.

    Raises KeyFileError when the key file became unreadable or empty.
    """
    serving = get_serving()
    if serving.admin_api_key_file is not None:
        return KEY_FILE.read(serving.admin_api_key_file)
    return None if serving.admin_api_key is None else serving.admin_api_key.encode("utf-8")


def _authorization(request: Request) -> bytes | None:
    """The raw bytes of the Authorization header, as the client sent them."""
    for name, value in request.scope.get("headers", ()):
        if name == b"authorization":
            return bytes(value)
    return None


def _check_bearer(request: Request, key: bytes, *, what: str, flag: str) -> None:
    header = _authorization(request)
    scheme, sep, token = (header or b"").partition(b" ")
    if not header or not sep or scheme.lower() != b"bearer" or not token:
        raise HTTPProblem(401, f"{what} needs 'Authorization: Bearer <key>'", headers={"WWW-Authenticate": "Bearer"})
    if not hmac.compare_digest(token, key):
        raise HTTPProblem(403, f"the bearer key is not valid for {what} -- use the key given with {flag}")


def require_admin(request: Request) -> None:
    """Let the request through only with the admin key; refuse all admin calls when none is set."""
    try:
        key = admin_key()
    except KeyFileError as exc:
        raise HTTPProblem(503, f"admin routes are unavailable: {exc}") from None
    if key is None:
        msg = (
            "admin routes are disabled: this server has no admin key -- restart it with "
            "--admin-api-key-file FILE or env SGCONF_ADMIN_API_KEY"
        )
        raise HTTPProblem(403, msg)
    flag = "--admin-api-key-file" if get_serving().admin_api_key_file is not None else "--admin-api-key"
    _check_bearer(request, key, what="admin routes", flag=flag)


def require_api_key(request: Request) -> None:
    """Let the request through when no api_key is set, or with that key."""
    key = get_serving().api_key
    if key is not None:
        _check_bearer(request, key.encode("utf-8"), what="this route", flag="--api-key")
