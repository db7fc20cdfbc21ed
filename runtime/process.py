"""The process-wide config state, owned here and nowhere else, and the one `reset()` that clears it.

It holds the published context and the view the accessors read, the contexts made active
by `use_context()` (per thread and per asyncio task), the open `override_server_args`
installs, the `(role, namespace)` pairs role mode `record` saw, and what `runtime.logs`
configured. Every other module of `runtime` keeps no state of its own, so `reset()`
needs no hooks to find it.

Reads stay at the floor when no `use_context()` block is open anywhere: the accessors
read `_view` (this module's global) and get the published view itself. While a block is
open, `_view` is a router that reads the active context of the calling thread or task,
so the cost of routing is paid only by processes that use it.
"""

from __future__ import annotations

import contextvars
import threading
import weakref
from typing import Any

from runtime.errors import NotPublishedError

# A `runtime.context.RuntimeContext`: typed loosely here, since that module is built on this one.
RuntimeContext = Any

# Writers of every context serialize here; re-entrant so a restore may run inside a publish's error path.
lock = threading.RLock()


class _Unpublished:
    """Stands in for the view before publish: any read raises with the fix."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # protocol probes (copy, pickle, torch.compile) are not config reads
            raise AttributeError(name)
        msg = (
            f"no runtime config is published: get_{name}() was read before publish() -- call "
            "runtime.publish(record, role=...) at startup, or use runtime.override_server_args(...) "
            "or the server_args pytest fixture in tests"
        )
        raise NotPublishedError(msg)

    def __repr__(self) -> str:
        return "<unpublished>"


UNPUBLISHED: Any = _Unpublished()

# The context of the calling thread or task inside `use_context()`; None outside every block.
active: contextvars.ContextVar[RuntimeContext | None] = contextvars.ContextVar("sgconf_active_context", default=None)


class _Router:
    """The view while any `use_context()` block is open: each read goes to the caller's own context."""

    __slots__ = ()

    def __getattribute__(self, name: str) -> Any:
        # every attribute, not only missing ones: a failed normal lookup first would cost an exception per read
        ctx = active.get()
        if ctx is None:
            ctx = current
        return getattr(UNPUBLISHED if ctx is None else ctx._state.view, name)

    def __repr__(self) -> str:
        return "<routed view>"


ROUTER: Any = _Router()

# The published context (None: nothing published) and the view accessors read.
current: RuntimeContext | None = None
_view: Any = UNPUBLISHED
# How many `use_context()` blocks are open in this process, in every thread and task.
routed = 0
# Open `override_server_args` installs, in install order (`runtime.testing`).
installs: list[Any] = []
# Role mode `record`: pairs seen so far, and whether the exit report is registered (`runtime.roles`).
recorded: set[tuple[str, str]] = set()
record_lock = threading.Lock()
report_registered = False
# `runtime.logs`: tags added to every event, the logger `announce` writes through, and whether
# logging was configured by us (reset puts structlog back only then).
log_tags: dict[str, Any] = {}
announcer: list[Any] = []
logging_configured = False


def _missing(view: Any, path: str, cls: type | None = None) -> Exception:
    """The error an accessor raises when the schema in use declares no namespace `path` (accessors call it)."""
    from runtime.snapshot import missing_namespace

    schema = getattr(view, "schema", None)
    if schema is None:
        return AttributeError(path)
    return missing_namespace(schema, path.partition(".")[0])


def _foreign(view: Any, cls: type, bag: Any) -> Exception:
    """The error a typed accessor raises when the schema in use has another class at its namespace's path."""
    from runtime.errors import ForeignNamespaceError
    from sgconf.bag_class import DECLARED_BY_ATTR, PATH_ATTR

    schema = getattr(view, "schema", None)
    mine = getattr(cls, DECLARED_BY_ATTR, "?")
    theirs = getattr(schema, "name", None) or getattr(type(bag), DECLARED_BY_ATTR, "?")
    path = getattr(cls, PATH_ATTR, "?")
    msg = (
        f"accessor({cls.__name__}) reads namespace {path!r} of schema {mine!r}, but the config in use is of schema "
        f"{theirs!r}, whose {path!r} is {type(bag).__name__} -- publish (or use_context) a record of schema {mine!r}, "
        f"or read it with accessor({path!r})"
    )
    return ForeignNamespaceError(msg)


# Typed accessors (`accessor(LoraConfig)`): each runs its fast body while the published schema
# can only hand it a bag of its own class, its checked body otherwise (`retarget`).
typed_accessors: weakref.WeakSet[Any] = weakref.WeakSet()
_targeted: list[Any] = [None]  # the schema the typed accessors were last set for ("routed" while routing)


def _accepts(fn: Any, schema: Any) -> bool:
    """Whether every bag `schema` serves at the accessor's path is of the accessor's class."""
    if schema is None:
        return True  # nothing published: the fast body raises NotPublishedError as it should
    try:
        found = schema.namespace_class(fn._sgconf_path)
    except Exception:
        return True  # the path is not the schema's: the fast body's AttributeError path says so
    return isinstance(found, type) and issubclass(found, fn._sgconf_class)


def retarget(fn: Any, schema: Any = ...) -> None:
    """Give typed accessor `fn` the body the published schema (or routing) needs."""
    target = _targeted[0] if schema is ... else schema
    fast, checked = fn._sgconf_codes
    fn.__code__ = fast if target != "routed" and _accepts(fn, target) else checked


def _retarget_all(target: Any) -> None:
    if _targeted[0] is target:
        return
    _targeted[0] = target
    for fn in list(typed_accessors):
        retarget(fn, target)


def published_view() -> Any:
    """What the accessors should read now that no block is open: the published view, or UNPUBLISHED."""
    return UNPUBLISHED if current is None else current._state.view


def refresh_view() -> None:
    """Point the accessors at the published view, or at the router while any `use_context()` block is open."""
    global _view
    _retarget_all("routed" if routed else (None if current is None else current.schema))
    _view = ROUTER if routed else published_view()


def show(view: Any) -> None:
    """The published context moved to a new generation: point the accessors at `view` (caller holds `lock`).

    What `refresh_view()` would do when only the view changed: neither the published
    context nor the routing did, so the accessors' bodies are already right.
    """
    global _view
    if not routed:
        _view = view


def install(ctx: RuntimeContext | None) -> RuntimeContext | None:
    """Make `ctx` the published context (None: nothing published); returns the one it replaced. Caller holds `lock`."""
    global current
    old = current
    current = ctx
    refresh_view()
    return old


def enter_routing() -> None:
    global routed
    with lock:
        routed += 1
        refresh_view()


def leave_routing() -> None:
    global routed
    with lock:
        routed -= 1
        refresh_view()


def context_in_use() -> RuntimeContext | None:
    """The context the calling thread or task reads: its `use_context()` one, else the published one."""
    ctx = active.get()
    return current if ctx is None else ctx


def reset() -> None:
    """Put the process back to its import-time config state: nothing published, no install, defaults for the rest.

    Open `use_context()` blocks keep their own context until they exit; everything else
    goes: the published context (every accessor raises again until the next publish), the
    open `override_server_args` installs, the pairs role mode `record` saw, the log tags,
    and the logging configuration when `runtime.logs` made it. The role mode is read from
    the environment at each publish, so it needs no reset.
    """
    global logging_configured
    with lock:
        install(None)
        installs.clear()
        with record_lock:
            recorded.clear()
        log_tags.clear()
        announcer.clear()
        if logging_configured:
            logging_configured = False
            import logging

            import structlog

            structlog.reset_defaults()
            for name in ("uvicorn", "uvicorn.error"):
                logger = logging.getLogger(name)
                logger.handlers[:] = []
                logger.setLevel(logging.NOTSET)
                logger.propagate = True


__all__ = [
    "ROUTER",
    "UNPUBLISHED",
    "active",
    "context_in_use",
    "current",
    "install",
    "lock",
    "published_view",
    "refresh_view",
    "reset",
]
