"""Request body limits: read at most `max_request_body_bytes`, parse JSON within depth and size bounds.

Every limit is a declared `serving` setting, read from the bag on each request so an
override applies at once. A body over the size limit is refused (413) from its
`Content-Length` before any of it is read, or as soon as the streamed bytes pass the
limit, so a huge upload never grows the process. Parsing refuses what the stdlib parser
would turn into a crash or an unbounded cost later: nesting past `max_json_depth` (the
parser recurses), integers longer than `max_json_integer_digits` (arithmetic on them is
quadratic and `int()` itself gives up past 4300 digits), a key given twice in one
object (JSON leaves open which one counts, and parsers differ), and strings holding lone
surrogates (they cannot be encoded as UTF-8, so tokenizing or logging them would fail).
Each refusal names the path of the value (`$.seed`). `NaN`/`Infinity` literals and
numbers that overflow to infinity parse to non-finite floats and are left to the model
the body is checked by (the request model for `/generate` and `/v1`, the config's
converter for overrides and attach options), so a NaN gets the same answer whether it
came as JSON or from Python.
Bodies arrive within `body_timeout_s` of the request (408 otherwise), so a client that
sends its body slowly, or never, does not hold a worker; one that closes its connection
mid-body raises `ClientGone`, answered 499 (nobody reads it) like any client gone.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import attrs
from fastapi import Request
from starlette.requests import ClientDisconnect

from engine.http.errors import ClientGone
from engine.http.problems import HTTPProblem
from runtime.serving import get_serving
from sgconf.errors import Problem, SgconfError

# a JSON string literal, escapes included; removed before brackets are counted
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


@attrs.frozen(slots=True)
class BodyLimits:
    """The limits one request is read and parsed under (a copy of the serving settings)."""

    max_bytes: int
    max_depth: int
    max_integer_digits: int
    timeout_s: float = 30.0

    @classmethod
    def current(cls) -> BodyLimits:
        serving = get_serving()
        return cls(
            serving.max_request_body_bytes,
            serving.max_json_depth,
            serving.max_json_integer_digits,
            serving.body_timeout_s,
        )


def _too_large(size: int | str, limit: int) -> HTTPProblem:
    msg = (
        f"the request body of {size} bytes is larger than 'max_request_body_bytes' ({limit}) "
        "-- send a smaller body, or raise --max-request-body-bytes"
    )
    # the rest of the body is never read, so the connection cannot carry another request: close it with the answer
    return HTTPProblem(413, msg, headers={"Connection": "close"})


async def read_body(request: Request, limits: BodyLimits) -> bytes:
    """The raw body, refused with 413 once it is known to exceed `limits.max_bytes`."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise HTTPProblem(400, f"the Content-Length header {declared!r} is not a byte count -- send a number")
        if int(declared) > limits.max_bytes:
            raise _too_large(int(declared), limits.max_bytes)
    chunks: list[bytes] = []
    size = 0

    async def read() -> None:
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > limits.max_bytes:
                raise _too_large(f"more than {limits.max_bytes}", limits.max_bytes)
            chunks.append(chunk)

    try:
        await asyncio.wait_for(read(), limits.timeout_s)
    except ClientDisconnect:  # it closed the connection mid-body: nobody is left to answer
        raise ClientGone("the client closed its connection while sending the body") from None
    except TimeoutError:
        msg = (
            f"the request body did not arrive within 'body_timeout_s' ({limits.timeout_s:g} s; {size} bytes came)"
            " -- send the body with the request"
        )
        raise HTTPProblem(408, msg, headers={"Connection": "close"}) from None
    return b"".join(chunks)


def nesting_depth(raw: bytes) -> int:
    """The deepest nesting of arrays and objects in `raw` (JSON text), counted without parsing it."""
    brackets = _STRING.sub(b'""', raw).translate(None, _NOT_BRACKETS)
    depth = deepest = 0
    for byte in brackets:
        depth += 1 if byte in (0x5B, 0x7B) else -1
        deepest = max(deepest, depth)
    return deepest


class _Refused(SgconfError, ValueError):
    """Raised from inside the parser's hooks; becomes a 422 problem at `path`."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.problem = Problem(path, message)


def _has_lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


@attrs.frozen(slots=True)
class _LongInteger:
    """An integer literal past 'max_json_integer_digits', kept unconverted until its path is known."""

    digits: int


@attrs.frozen(slots=True)
class _DuplicateKey:
    """An object that gives one key twice, kept in its place until its path is known."""

    key: str


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any] | _DuplicateKey:
    """A JSON object, or the first key it repeats: JSON leaves a repeated key's meaning open, so it is refused."""
    out = dict(pairs)
    if len(out) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                return _DuplicateKey(key)
            seen.add(key)
    return out


def _check_values(value: Any, path: str, limits: BodyLimits) -> None:
    """Refuse, naming the path, what the parser let through only to be reported here."""
    if isinstance(value, str):
        if not value.isascii() and _has_lone_surrogate(value):
            raise _Refused(path, "the string holds a lone UTF-16 surrogate (not valid unicode) -- send valid text")
    elif isinstance(value, _DuplicateKey):
        raise _Refused(f"{path}.{value.key}", "the key is given twice in one object -- give each key once")
    elif isinstance(value, _LongInteger):
        raise _Refused(
            path,
            f"an integer of {value.digits} digits is longer than 'max_json_integer_digits' "
            f"({limits.max_integer_digits}) allows",
        )
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_values(key, path, limits)
            _check_values(item, f"{path}.{key}", limits)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_values(item, f"{path}[{i}]", limits)


def parse_json(raw: bytes, limits: BodyLimits) -> Any:
    """Parse a body under `limits`; raises HTTPProblem 400 (not JSON) or 422 (JSON past a limit, naming its path)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        msg = f"the body is not valid UTF-8 (byte {exc.start}: {exc.reason}) -- send JSON encoded as UTF-8"
        raise HTTPProblem(400, msg) from None
    depth = nesting_depth(raw)
    if depth > limits.max_depth:
        why = Problem("$", f"nested {depth} levels deep, more than 'max_json_depth' ({limits.max_depth}) allows")
        raise HTTPProblem(422, "the body is nested too deeply -- flatten it", problems=[why])

    def integer(digits: str) -> int | _LongInteger:
        count = len(digits.lstrip("-"))
        return _LongInteger(count) if count > limits.max_integer_digits else int(digits)

    try:
        # NaN, Infinity and numbers that overflow parse to non-finite floats, refused by the model checking the body
        body = json.loads(text, parse_int=integer, parse_constant=float, object_pairs_hook=_object)
        _check_values(body, "$", limits)
    except _Refused as exc:
        raise HTTPProblem(422, "the body holds a value this server does not accept", problems=[exc.problem]) from None
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        raise HTTPProblem(400, f"the body is not valid JSON ({exc}) -- send a JSON object") from None
    return body


__all__ = ["BodyLimits", "nesting_depth", "parse_json", "read_body"]
