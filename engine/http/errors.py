"""Exceptions of the HTTP edge: the answers it gives, and what it refuses at startup.

They derive from `engine.errors.EngineError` (so from `sgconf.errors.SgconfError`); how
each becomes an HTTP answer lives with the routes (`engine.http.problems`,
`engine.http.openai_routes`), so this module imports no web framework.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.errors import MAX_PROBLEMS_SHOWN, EngineError, more_problems
from sgconf.errors import Problem, SgconfError


class KeyFileError(EngineError, ValueError):
    """Raised when the admin key file cannot be read or holds no key."""


class ClientGone(SgconfError):
    """Raised when the client closed its connection before its answer was ready."""


class OpenAIError(EngineError):
    """A request OpenAI's API would refuse: answered in its error body, with the headers of the problem it came
    from (`Connection: close` after a body timeout, `Retry-After` of a busy engine)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers


def shown_problems(lines: list[str], omitted: int = 0) -> list[str]:
    """The `$.path: reason` lines a refusal lists: the first `MAX_PROBLEMS_SHOWN`, then one counting the rest.

    `omitted` counts problems found but never made into lines (`InvalidRequest.omitted`).
    """
    if len(lines) <= MAX_PROBLEMS_SHOWN and not omitted:
        return lines
    shown = lines[:MAX_PROBLEMS_SHOWN]
    return [*shown, more_problems(len(lines) - len(shown) + omitted)]


class HTTPProblem(EngineError):
    """An error answer: status, a one-line detail and optional `$.path: reason` lines (capped by `shown_problems`).

    Given `problems`, the lines are theirs, and the problems stay available as data
    (path, message, source), so a route that answers in another shape (OpenAI's
    `param`) reads the path, never the rendered line.
    """

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        errors: list[str] | None = None,
        problems: Sequence[Problem] | None = None,
        extra: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        omitted: int = 0,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.problems: tuple[Problem, ...] = tuple(problems or ())
        lines = [str(p) for p in self.problems] if errors is None and problems is not None else errors
        self.errors = None if lines is None else shown_problems(lines, omitted)
        self.extra = extra or {}
        self.headers = headers

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"detail": self.detail}
        if self.errors is not None:
            out["errors"] = self.errors
        out.update(self.extra)
        return out


__all__ = ["ClientGone", "HTTPProblem", "KeyFileError", "OpenAIError", "shown_problems"]
