"""Bearer-key checks for the inference routes (`api_key`) and the admin routes (`admin_api_key`).

Keys are read from the serving bag on every request, so an override of a key is
effective at once; the comparison is constant-time.
"""

from __future__ import annotations

import hmac

from fastapi import Request

from engine.http.problems import HTTPProblem
from runtime.accessors import get_serving


def _check_bearer(request: Request, key: str, *, what: str, flag: str) -> None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if not header or scheme.lower() != "bearer" or not token:
        raise HTTPProblem(401, f"{what} needs 'Authorization: Bearer <key>'", headers={"WWW-Authenticate": "Bearer"})
    if not hmac.compare_digest(token.strip().encode(), key.encode()):
        raise HTTPProblem(403, f"the bearer key is not valid for {what} -- use the key given with {flag}")


def require_admin(request: Request) -> None:
    """Let the request through only with the admin key; refuse all admin calls when none is set."""
    key = get_serving().admin_api_key
    if key is None:
        msg = "admin routes are disabled: this server has no admin_api_key -- restart it with --admin-api-key KEY"
        raise HTTPProblem(403, msg)
    _check_bearer(request, key, what="admin routes", flag="--admin-api-key")


def require_api_key(request: Request) -> None:
    """Let the request through when no api_key is set, or with that key."""
    key = get_serving().api_key
    if key is not None:
        _check_bearer(request, key, what="this route", flag="--api-key")
