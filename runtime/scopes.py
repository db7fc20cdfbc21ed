"""`Scope`: one open `ctx.scoped(...)` block, a write with an identity of its own."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from runtime.errors import LifecycleError

if TYPE_CHECKING:
    from runtime.state import Write


class ScopeOwner(Protocol):
    """What a scope needs of its context: a way in and a way out."""

    def _enter_scope(self, scope: Scope) -> Any: ...

    def _exit_scope(self, write: Write) -> None: ...


class Scope:
    """One open `scoped()` block: enter adds its values on top, exit takes exactly them away.

    Each scope is its own write with its own identity, so scopes may close in any order,
    from any thread, task or generator. A scope is entered once; exit is idempotent.
    """

    __slots__ = ("_context", "_values", "_token", "_write", "_closed")

    def __init__(self, context: ScopeOwner, values: dict[str, Any]) -> None:
        self._context = context
        self._values = values
        self._token = object()
        self._write: Write | None = None
        self._closed = False

    def __enter__(self) -> Any:
        if self._write is not None or self._closed:
            raise LifecycleError("this scope was already entered -- call ctx.scoped(...) again for a new one")
        try:
            # the write is stored by _enter itself, before anything after the swap can raise,
            # so the finally below always has what it must take away
            return self._context._enter_scope(self)
        except BaseException:
            if self._write is not None:
                self.__exit__()
            raise

    def __exit__(self, *exc: object) -> None:
        if self._write is None or self._closed:
            return
        self._closed = True
        self._context._exit_scope(self._write)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open" if self._write is not None else "new"
        return f"Scope({', '.join(self._values)}; {state})"


__all__ = ["Scope"]
