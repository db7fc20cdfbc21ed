"""structlog setup for a server, from the fields its schema names as the `verbosity` and `log_style` knobs.

Events are names plus fields (`log.info("http.request", method=..., path=..., status=...)`);
the log style picks the renderer: `console` for people, `json` (one object per line) for
collectors. Secrets never reach a log: config values are logged through the redacting
dumps of `runtime.overrides`.

`configure_from_config()` makes the level live: it is read from the context at every
event, so an override of it changes what is logged from the next event on, for
structlog and for uvicorn's records alike. When no config is published (after the
engine stopped) the level at configure time holds. What this module configured lives
in `runtime.process`, so `runtime.reset()` undoes it.

Logs go to stderr, so stdout stays for what a command prints. A process that is one
replica of a group tags every line, its own and uvicorn's, with its data-parallel rank
(`tag_process(dp_rank=1)`: a `dp_rank` field in JSON, a `[DP1]` prefix on the console),
so interleaved replica logs can be told apart. `announce()` writes an event whatever the
level: the URL a server listens on must be findable even under `--log-level warning`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any, TextIO

import structlog

from runtime import process
from sgconf.errors import FieldValueError

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}


def tag_process(**tags: Any) -> None:
    """Tag every later log line of this process with `tags` (e.g. `dp_rank=0` in a replica)."""
    process.log_tags.update(tags)


def _add_tags(logger: Any, method_name: str, event_dict: Any) -> Any:
    for key, value in process.log_tags.items():
        event_dict.setdefault(key, value)
    return event_dict


class _RankPrefix:
    """Wraps the console renderer so a replica's lines start with `[DP<rank>]`, easy to grep and to eye."""

    def __init__(self, renderer: Any) -> None:
        self.renderer = renderer

    def __call__(self, logger: Any, method_name: str, event_dict: Any) -> Any:
        rank = event_dict.pop("dp_rank", None)
        line = self.renderer(logger, method_name, event_dict)
        return line if rank is None else f"[DP{rank}] {line}"

    def __repr__(self) -> str:
        return f"<rank prefix on {self.renderer!r}>"


def announce(event: str, **fields: Any) -> None:
    """Log `event` at info whatever the configured level (the listen URL); configures defaults first if needed."""
    if not process.announcer:
        configure_logging()
    process.announcer[0].info(event, **fields)


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
        raise FieldValueError(f"unknown log level {level!r} -- use one of {', '.join(LEVELS)}")
    if fmt not in ("console", "json"):
        raise FieldValueError(f"unknown log format {fmt!r} -- use console or json")
    out = stream if stream is not None else sys.stderr
    renderer: Any = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    if fmt == "console":
        renderer = _RankPrefix(renderer)
    shared: list[Any] = [
        _add_tags,
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
        # one write per line: replicas share stderr, and print() would write the newline apart
        logger_factory=structlog.WriteLoggerFactory(out),
        cache_logger_on_first_use=False,
    )
    process.logging_configured = True
    process.announcer[:] = [
        structlog.wrap_logger(
            structlog.WriteLogger(out),
            processors=[*shared, renderer],
            wrapper_class=structlog.make_filtering_bound_logger(logging.NOTSET),
        )
    ]
    # uvicorn's own records (startup, errors) go through the same renderer.
    handler = logging.StreamHandler(out)
    if gate is not None:
        handler.addFilter(gate)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer], foreign_pre_chain=shared
        )
    )
    for name in ("uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(logging.DEBUG if gate is not None else LEVELS[level])
        logger.propagate = False


def _knob_values(schema: Any, flat: Any) -> tuple[str, str, str | None]:
    level_field, style_field = schema.knob("verbosity"), schema.knob("log_style")
    level = flat[level_field] if level_field is not None else "info"
    style = flat[style_field] if style_field is not None else "console"
    return level, style, level_field


def configure_from_record(record: Any) -> None:
    """Configure from a record's launch values before it is published.

    A server configures this early so that even the publish event goes to stderr in
    the chosen format, rather than to structlog's default (stdout).
    """
    from sgconf.declarations import schema_of
    from sgconf.record import record_to_dict

    level, style, _ = _knob_values(schema_of(record), record_to_dict(record))
    configure_logging(level=level, fmt=style)


def configure_from_config(stream: TextIO | None = None, *, live: Callable[[], str] | None = None) -> None:
    """Configure from the context in use: the log style now, the level live (module docstring).

    `live` reads the level at each event; by default it reads the schema's `verbosity`
    knob field from the context in use.
    """
    from runtime.context import get_context

    ctx = get_context()
    level, style, level_field = _knob_values(ctx.schema, ctx._state.flat)
    if live is None and level_field is not None:
        live = _live_level(level_field)
    configure_logging(level=level, fmt=style, stream=stream, live=live)


def _live_level(field: str) -> Callable[[], str]:
    def level() -> str:
        from runtime.context import get_context

        return str(get_context()._state.flat[field])

    return level
