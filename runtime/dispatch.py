"""Telling the world about a commit once it is live: the log line and each subscriber, every one isolated.

The writer lock is never held here: a subscriber may read the context, take another
override, or wait on another thread without deadlocking. An `Exception` from a subscriber
or a log sink is logged (`config.subscriber_failed`) or written to stderr and swallowed;
a `BaseException` that is not an `Exception` (`KeyboardInterrupt`, `SystemExit`) means the
process is being stopped: every later subscriber still runs, then it is re-raised.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
import structlog

from runtime.overrides import ConfigEvent, OverrideRecord, Subscription

if TYPE_CHECKING:
    from runtime.state import State

log = structlog.get_logger("sgconf.runtime")


@attrs.define(slots=True, eq=False)
class Announcement:
    """What a commit tells the world once it is live: the log line's record and, for subscribers, the event.

    Internal and short-lived (built under the writer lock, read once after it), so not
    frozen: it is made on every commit, and a frozen class pays a setattr call per field.
    The event a subscriber receives is built only when one wants it.
    """

    event_name: str
    record: OverrideRecord
    snapshot: Any  # what the commit produced, as the context's accessors hand it out
    subscribers: tuple[Subscription, ...]

    def fields(self) -> dict[str, Any]:
        """The log line's fields, secrets redacted; rendered only when the line is written."""
        rec = self.record
        return {
            "source": rec.source,
            "layer": rec.layer,
            "generation": rec.generation,
            "fields": {c.name: c.redacted() for c in rec.changes},
        }


class Dispatching:
    """The part of a context that builds and delivers its announcements."""

    __slots__ = ()
    _subscribers: tuple[Subscription, ...]

    def _news(self, event_name: str, rec: OverrideRecord, new: State) -> Announcement:
        return Announcement(event_name, rec, new.view, self._subscribers)

    def _announce(self, news: Announcement) -> None:
        """Log the commit and notify subscribers, each isolated; re-raise a BaseException only after all ran."""
        stop = _emit("info", news.event_name, render=news.fields)
        if not news.subscribers:
            if stop is not None:
                raise stop
            return
        rec = news.record
        event = ConfigEvent(rec, news.snapshot)
        changed = rec.fields
        for sub in news.subscribers:
            if not sub.wants(changed):
                continue
            try:
                sub.callback(event)
            except Exception as exc:  # a subscriber must not undo a commit or starve the others
                stop = stop or _emit(
                    "error",
                    "config.subscriber_failed",
                    subscriber=_name_of(sub.callback),
                    source=rec.source,
                    generation=rec.generation,
                    error=f"{type(exc).__name__}: {exc}",
                )
            except BaseException as exc:  # the process is being stopped: finish notifying, then stop
                if stop is None:
                    stop = exc
                    _emit(
                        "error",
                        "config.subscriber_interrupted",
                        subscriber=_name_of(sub.callback),
                        source=rec.source,
                        generation=rec.generation,
                        error=type(exc).__name__,
                    )
        if stop is not None:
            raise stop


def _emit(
    level: str, event: str, /, render: Callable[[], dict[str, Any]] | None = None, **fields: Any
) -> BaseException | None:
    """Log one event; a failing sink is reported on stderr, never raised; a BaseException is returned.

    With `render`, the fields are its result, built only when the logger would keep the
    event (a filtered-out override line costs no copy of its values).
    """
    try:
        logger = _logger()
        if render is not None:
            if not _enabled(logger, level):
                return None
            fields = render()
        getattr(logger, level)(event, **fields)
    except Exception as exc:
        try:
            sys.stderr.write(f"sgconf: could not log {event} ({type(exc).__name__}: {exc})\n")
        except Exception:  # noqa: S110 - nowhere left to report to
            pass
    except BaseException as exc:
        return exc
    return None


_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
_bound: tuple[tuple[Any, ...], Any] = ((), None)


def _logger() -> Any:
    """`log` bound for structlog's current configuration and standard streams, bound once per change of them.

    structlog's lazy proxy binds a new logger at every event, which costs ten times what a
    filtered-out event does; a change of configuration (`structlog.configure`,
    `capture_logs`) or of `sys.stdout`/`sys.stderr` (which a print logger binds at
    creation) binds afresh, so what is logged is what the proxy would have logged.
    """
    global _bound
    key = (*structlog.get_config().values(), sys.stdout, sys.stderr)  # held, so never a reused id
    seen, bound = _bound
    if seen != key:
        bound = log.bind()
        _bound = (key, bound)
    return bound


def _enabled(logger: Any, level: str) -> bool:
    """Whether `logger` keeps `level`, asked only of a class that defines `is_enabled_for`.

    Looked up on the class: structlog's generic BoundLogger answers any attribute with a
    proxy that logs the call as an event (and returns what the renderer made of it).
    """
    check = getattr(type(logger), "is_enabled_for", None)
    return True if check is None else bool(check(logger, _LEVELS[level]))


def _name_of(callback: Any) -> str:
    return getattr(callback, "__qualname__", None) or repr(callback)


__all__ = ["Announcement", "Dispatching", "_emit"]
