"""Exceptions of the HTTP edge: the answers it gives, and what it refuses at startup.

They derive from `engine.errors.EngineError` (so from `sgconf.errors.SgconfError`); how
each becomes an HTTP answer lives with the routes (`engine.http.problems`,
`engine.http.openai_routes`), so this module imports no web framework.
"""

from __future__ import annotations

from typing import Any

from engine.errors import EngineError
from sgconf.errors import SgconfError


class KeyFileError(EngineError, ValueError):
    """Raised when the admin key file cannot be read or holds no key."""


class ClientGone(SgconfError):
    """Raised when the client closed its connection before its answer was ready."""


class OpenAIError(EngineError):
    """A request OpenAI's API would refuse: answered in its error body."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code


class HTTPProblem(EngineError):
    """An error answer: status, a one-line detail and optional `$.path: reason` lines."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        errors: list[str] | None = None,
        extra: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.errors = errors
        self.extra = extra or {}
        self.headers = headers

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"detail": self.detail}
        if self.errors is not None:
            out["errors"] = self.errors
        out.update(self.extra)
        return out


__all__ = ["ClientGone", "HTTPProblem", "KeyFileError", "OpenAIError"]
