"""structlog setup for the server, from the `observability` bag.

Events are names plus fields (`log.info("http.request", method=..., path=..., status=...)`);
`log_format` picks the renderer: `console` for people, `json` (one object per line) for
collectors. Secrets never reach a log: config values are logged through the redacting
dumps of `runtime.overrides`.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR, "critical": logging.CRITICAL}


def configure_logging(*, level: str = "info", fmt: str = "console", stream: TextIO | None = None) -> None:
    """Route structlog (and the stdlib loggers uvicorn uses) to `stream` with one renderer.

    `fmt` is `console` or `json`; `level` one of debug, info, warning, error, critical.
    Raises ValueError for anything else.
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
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )
    # uvicorn's own records (startup, errors) go through the same renderer.
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
                                            foreign_pre_chain=shared)
    )
    for name in ("uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(LEVELS[level])
        logger.propagate = False


def configure_from_config() -> None:
    """Configure from the published `observability` bag (`log_level`, `log_format`)."""
    from runtime.accessors import get_observability

    obs = get_observability()
    configure_logging(level=obs.log_level, fmt=obs.log_format)
