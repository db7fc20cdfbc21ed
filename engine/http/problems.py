"""Error answers: `HTTPProblem`, and the status code of every exception a route may raise.

A status is chosen by the exception's type (`STATUS_BY_TYPE`, most specific class
first), or for a change a replica group refused by the typed reason each rank gave
(`STATUS_BY_REFUSAL`), never by comparing messages, so a new failure gets a status by declaring a
class. The body is always `{"detail": ..., "errors": [...]}`: one line of what
happened and, for config problems, one `$.namespace.field: reason` line each, the
first `MAX_PROBLEMS_SHOWN` of them and then one line counting the rest, on every route.
"""

from __future__ import annotations

import math
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from engine.errors import (
    DeadlineExceeded,
    EngineBusy,
    EngineStopped,
    GenerationError,
    NoSuchReplica,
    OwnDeadlineExceeded,
    Refusal,
    ReplicaElsewhere,
    ReplicaExited,
    ReplicaFailed,
    ReplicaRunning,
    RequestRejected,
    StorageRefused,
)
from engine.http.disconnect import gone_response
from engine.http.errors import ClientGone, HTTPProblem  # declared there; re-exported for existing imports
from runtime.errors import GroupMessageError, NotPublishedError, PropagationFailed, RanksSilent, ResyncFailed
from sgconf.errors import ConfigError

log = structlog.get_logger(__name__)


# most specific first: the first class an exception is an instance of decides
STATUS_BY_TYPE: tuple[tuple[type[Exception], int], ...] = (
    (RanksSilent, 503),
    (ResyncFailed, 503),
    (StorageRefused, 400),
    (ConfigError, 422),
    (RequestRejected, 400),
    (EngineBusy, 409),
    (ReplicaRunning, 409),
    (ReplicaExited, 409),
    (ReplicaElsewhere, 409),
    (NoSuchReplica, 404),
    (OwnDeadlineExceeded, 408),  # before its base class: the client's own budget ran out
    (DeadlineExceeded, 504),
    (GenerationError, 503),
    (EngineStopped, 503),
    (ReplicaFailed, 503),
    (GroupMessageError, 502),  # another rank answered what this one cannot read: a bad answer from upstream
)


# a config change refused by some rank of a group: the status of its reason, as one engine
# raising that reason's exception would answer; with several reasons the first listed wins,
# so a change the client must fix is reported before a state of the server
STATUS_BY_REFUSAL: tuple[tuple[Refusal, int], ...] = (
    (Refusal.INVALID, 422),
    (Refusal.NOT_HOT, 422),
    (Refusal.CAPACITY, 422),
    (Refusal.STORAGE, 400),
    (Refusal.DIVERGED, 409),
    (Refusal.DRAIN_TIMEOUT, 409),
    (Refusal.FAILED, 503),
)


def status_of(exc: BaseException) -> int:
    """The HTTP status for an exception a route let through; 500 for anything undeclared."""
    if isinstance(exc, PropagationFailed) and not isinstance(exc, RanksSilent):
        given = set(exc.reasons.values())
        return next((status for reason, status in STATUS_BY_REFUSAL if reason in given), 503)
    for cls, status in STATUS_BY_TYPE:
        if isinstance(exc, cls):
            return status
    return 500


def problem_of(exc: BaseException) -> HTTPProblem:
    """The answer for a declared exception, with its `$.path` lines when it carries config problems."""
    status = status_of(exc)
    if isinstance(exc, ConfigError):
        return HTTPProblem(status, exc.header, problems=exc.problems, omitted=getattr(exc, "omitted", 0))
    extra: dict[str, Any] = {}
    headers = None
    if isinstance(exc, EngineBusy):
        extra = {"queued": exc.queued, "running": exc.running}
        if exc.retry_after_s is not None:
            # whole seconds (RFC 9110); never 0, which would invite a tight retry loop
            headers = {"Retry-After": str(max(1, math.ceil(exc.retry_after_s)))}
    return HTTPProblem(status, str(exc), extra=extra, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    """Answer every declared exception with its status; anything else is a bare 500 with no traceback."""

    async def _problem(request: Request, exc: Exception) -> JSONResponse:
        problem = exc if isinstance(exc, HTTPProblem) else problem_of(exc)
        return JSONResponse(problem.body(), status_code=problem.status, headers=problem.headers)

    async def _unpublished(request: Request, exc: Exception) -> JSONResponse:
        # the engine stopped and took its config with it: the server is going away, not broken
        msg = "the server's config is no longer published (its engine stopped) -- start a new server"
        return JSONResponse({"detail": msg}, status_code=503)

    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error("http.error", path=request.url.path, error=repr(exc))
        return JSONResponse({"detail": "internal error -- see the server log"}, status_code=500)

    async def _invalid(request: Request, exc: Exception) -> JSONResponse:
        # a path or query parameter FastAPI itself checked (a replica index that is not a number)
        errors: list[dict[str, Any]] = getattr(exc, "errors", lambda: [])()
        lines = [f"$.{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', 'invalid')}" for e in errors]
        return await _problem(request, HTTPProblem(422, "invalid request", errors=lines))

    from fastapi.exceptions import RequestValidationError

    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(HTTPProblem, _problem)
    for cls, _status in STATUS_BY_TYPE:
        app.add_exception_handler(cls, _problem)
    app.add_exception_handler(NotPublishedError, _unpublished)
    app.add_exception_handler(ClientGone, lambda request, exc: gone_response())
    app.add_exception_handler(Exception, _unexpected)
