"""The typed hooks a schema declares besides its fields: cross-field `Rule`s, resolution `Step`s, `Derived` values, runtime knobs.

Each names what it reads (fields, or for a derived value the namespaces), and a schema
checks those names when it freezes, so a typo is a `DeclarationError` at import rather
than a `KeyError` at the first load. A copy of a schema that leaves a namespace out
leaves out the hooks that read it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

Values = Mapping[str, Any]


@attrs.frozen(slots=True)
class Rule:
    """A named cross-field check over `fields`; `check` returns a message or None."""

    name: str
    fields: tuple[str, ...]
    check: Callable[[Values], str | None]
    # A launch-only rule constrains the inputs pools are sized from; post-publish
    # overrides are not held to it (the derived accessors take the max instead).
    launch_only: bool = False

    def __call__(self, values: Values) -> str | None:
        return self.check(values)


Decisions = Mapping[str, tuple[Any, str]]


@attrs.frozen(slots=True)
class Step:
    """One resolution step: its name (provenance `resolution:<name>`), the fields it reads, and what it runs.

    `run(values, inputs)` returns `{field: (value, reason)}` for what it decided. The
    declared reads are checked against the schema when it freezes, and a copy of a schema
    that leaves one of them out leaves the step out too.
    """

    name: str
    reads: tuple[str, ...]
    run: Callable[[dict[str, Any], Any], Decisions]

    def __call__(self, values: dict[str, Any], inputs: Any) -> Decisions:
        return self.run(values, inputs)


@attrs.frozen(slots=True)
class Derived:
    """A value computed from the bags, offered as `snapshot.<name>()`; it follows overrides.

    `compute(view)` reads the bags as attributes of `view` (a snapshot, or a role-guarded
    view of one), and only the ones in `namespaces` (`"spec"`, `"exec.mamba"`): a schema
    checks they exist when it freezes, and a copy that leaves one out drops the value.
    """

    name: str
    namespaces: tuple[str, ...]
    compute: Callable[[Any], Any]

    def __call__(self, view: Any) -> Any:
        return self.compute(view)

    @property
    def doc(self) -> str | None:
        """What the value is: the compute function's docstring."""
        return self.compute.__doc__


@attrs.frozen(slots=True)
class RuntimeKnobs:
    """Which fields of a schema the runtime itself reads; a knob left None keeps the runtime's default.

    `history_limit` (int): how many overrides a context's log keeps (default 256).
    `sync_timeout` (float, seconds): how long a config group's round waits for every rank
    (default 30). `verbosity` (a level name) and `log_style` (`console` or `json`): what
    the runtime's logging is configured from, the level read live at every event.
    """

    history_limit: str | None = None
    sync_timeout: str | None = None
    verbosity: str | None = None
    log_style: str | None = None

    def names(self) -> dict[str, str]:
        """knob -> field for the knobs a schema sets."""
        return {k: v for k, v in attrs.asdict(self).items() if v is not None}


__all__ = ["Decisions", "Derived", "Rule", "RuntimeKnobs", "Step", "Values"]
