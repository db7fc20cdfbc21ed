"""What a rule of the read ratchet is: the `Access` it judges, its tables of examples, its kind."""

from __future__ import annotations

from typing import ClassVar, Literal

import attrs


@attrs.frozen(slots=True)
class Access:
    """How a field was reached: `base` is direct/alias/attribute/parameter, `via` attribute or getattr."""

    base: str
    via: str
    write: bool


@attrs.frozen(slots=True)
class Invalid:
    """An INVALID example and the `(kind, field)` sites it must produce, in source order."""

    code: str
    expect: tuple[tuple[str, str], ...]


class Rule:
    """A kind of raw access; subclasses set `kind`, `summary` and the two tables.

    Most kinds are named by one part of `Access` (`via == "getattr"` is a getattr), so such
    a rule says only which part (`axis`) and its kind is written once; a rule judged
    otherwise (`write`) overrides `matches`.
    """

    kind: ClassVar[str]
    summary: ClassVar[str]
    #: the part of `Access` that holds this rule's kind: `base` (what the record was reached through) or `via`
    axis: ClassVar[Literal["base", "via"]] = "base"
    VALID: ClassVar[tuple[str, ...]] = ()
    INVALID: ClassVar[tuple[Invalid, ...]] = ()

    def matches(self, access: Access) -> bool:
        return (access.base if self.axis == "base" else access.via) == self.kind

    def __repr__(self) -> str:
        return f"<{self.kind} rule>"


__all__ = ["Access", "Invalid", "Rule"]
