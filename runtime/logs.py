"""structlog setup for the server, from the `observability` bag.

Events are names plus fields (`log.info("http.request", method=..., path=..., status=...)`);
`log_format` picks the renderer: `console` for people, `json` (one object per line) for
collectors. Secrets never reach a log: config values are logged through the redacting
dumps of `runtime.overrides`.

`configure_from_config()` makes `log_level` live: the level is read from the
`observability` bag at every event (one accessor read), so an override of it changes
what is logged from the next event on, for structlog and for uvicorn's records alike.
When no config is published (after the engine stopped) the level at configure time holds.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any, TextIO

import structlog

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR, "critical": logging.CRITICAL}


# structlog method names that are not level names
_METHOD_LEVELS = {**LEVELS, "warn": logging.WARNING, "exception": logging.ERROR, "fatal": logging.CRITICAL}


class LiveLevel:
    """The level in force now: `current()` (a `log_level` name), or `fallback` when that cannot be read.

    Used as a structlog processor (drops events below the level) and as a stdlib
    logging filter (for uvicorn's records), so one setting filters both.
    """

    def __init__(self, current: Callable[[], str], fallback: str) -> None:
        self._current = current
        self.fallback = fallback

    def threshold(self) -> int:
        try:
            return LEVELS.get(self._current(), LEVELS[self.fallback])
        except Exception:  # unpublished (the engine stopped): logging must go on
            return LEVELS[self.fallback]

    def __call__(self, logger: Any, method_name: str, event_dict: Any) -> Any:
        if _METHOD_LEVELS.get(method_name, logging.INFO) < self.threshold():
            raise structlog.DropEvent
        return event_dict

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= self.threshold()

    def __repr__(self) -> str:
        return f"<live log level, fallback {self.fallback}>"


def configure_logging(
    *, level: str = "info", fmt: str = "console", stream: TextIO | None = None, live: Callable[[], str] | None = None
) -> None:
    """Route structlog (and the stdlib loggers uvicorn uses) to `stream` with one renderer.

    `fmt` is `console` or `json`; `level` one of debug, info, warning, error, critical.
    With `live`, a callable returning a level name, the level is read from it at every
    event and `level` is only the fallback. Raises ValueError for anything else.
    """
    if level not in LEVELS:
        raise ValueError(f"unknown log level {level!r} -- use one of {', '.join(LEVELS)}")
    if fmt not in ("console", "json"):
        raise ValueError(f"unknown log format {fmt!r} -- use console or json")
    out = stream if stream is not None else sys.stderr
    renderer: Any = structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    gate = LiveLevel(live, level) if live is not None else None
    head: list[Any] = [gate] if gate is not None else []
    structlog.configure(
        processors=[*head, *shared, structlog.processors.format_exc_info, renderer],
        # a live level filters in the processor chain; the bound logger lets everything through
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG if gate is not None else LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )
    # uvicorn's own records (startup, errors) go through the same renderer.
    handler = logging.StreamHandler(out)
    if gate is not None:
        handler.addFilter(gate)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
                                            foreign_pre_chain=shared)
    )
    for name in ("uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(logging.DEBUG if gate is not None else LEVELS[level])
        logger.propagate = False


def configure_from_config(stream: TextIO | None = None) -> None:
    """Configure from the published `observability` bag: `log_format` now, `log_level` live (module docstring)."""
    from runtime.accessors import get_observability

    obs = get_observability()
    configure_logging(level=obs.log_level, fmt=obs.log_format, stream=stream, live=_live_log_level)


def _live_log_level() -> str:
    from runtime.accessors import get_observability

    return get_observability().log_level
