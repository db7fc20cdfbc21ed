"""engine: the serving runtime that embeds sgconf.

It publishes a record (role `scheduler`), plans and builds the KV pools from the
`mem_cache` configurators, runs a small deterministic model through the `attention`
backends, and serves it over one HTTP app (`engine.http`), in one process or as a
group of replicas behind a controller (`engine.dp`). It is the reference user of the
config core: everything it knows about its settings it reads through accessors.

`import engine` stays light; `engine.Engine` imports torch on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.engine import Engine

__all__ = ["Engine"]


def __getattr__(name: str) -> Any:
    # torch is only imported when the engine itself is asked for
    if name == "Engine":
        from engine.engine import Engine

        return Engine
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
