"""Exceptions raised by sgconf; this module imports nothing of ours so every layer can use it.

Every exception the project raises on purpose derives from `SgconfError`, declared here;
each package declares its own in its `errors.py` on top of it. `ConfigError` is the one
for bad input: it lists every problem found, each naming the field, the value and its
source.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs


@attrs.frozen(slots=True)
class Problem:
    """One bad input: where it is (`$.schedule.page_size`), what is wrong, where it came from."""

    path: str
    message: str
    source: str | None = None

    def __str__(self) -> str:
        where = f" ({self.source})" if self.source else ""
        return f"{self.path}: {self.message}{where}"


class SgconfError(Exception):
    """The root of every exception sgconf and the runtimes built with it raise on purpose."""


class ConfigError(SgconfError, ValueError):
    """Raised when configuration input is invalid; lists every problem found, not just the first."""

    def __init__(self, problems: Iterable[Problem] | str, *, header: str | None = None) -> None:
        if isinstance(problems, str):
            problems = [Problem("$", problems)]
        self.problems: tuple[Problem, ...] = tuple(problems)
        self.header = header or _default_header(self.problems)
        super().__init__(self.render())

    def render(self) -> str:
        lines = [self.header]
        lines.extend(f"  {p}" for p in self.problems)
        return "\n".join(lines)

    def lines(self) -> list[str]:
        """The problems as `$.path: message (source)` strings, e.g. for an HTTP 422 body."""
        return [str(p) for p in self.problems]

    def __str__(self) -> str:
        return self.render()


def _default_header(problems: Sequence[Problem]) -> str:
    n = len(problems)
    return f"invalid configuration: {n} problem{'s' if n != 1 else ''}"


class UnknownFieldError(ConfigError, KeyError):
    """Raised when a field name is not declared in any namespace."""

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return self.render()


class OverrideRefused(ConfigError, PermissionError):
    """Raised when a field may not be changed after publish by the given source."""


class ResolutionError(ConfigError, RuntimeError):
    """Raised when resolution of a record fails, or is retried after it failed once."""


class UsageError(ConfigError):
    """Raised when command-line arguments cannot be parsed (unknown flag, missing value)."""


class PluginUnavailable(ConfigError):
    """Raised when a registered plug-in cannot be loaded (its entry point fails to import).

    The problem sits at the path of the setting that chose it when the caller names one
    (the framework knows no schema); `name` and `reason` let a caller report it its own way.
    """

    def __init__(
        self, problems: Iterable[Problem] | str, *, header: str | None = None, name: str = "", reason: str = ""
    ) -> None:
        super().__init__(problems, header=header)
        self.name = name
        self.reason = reason


class DeclarationError(SgconfError, TypeError):
    """Raised at import when namespace declarations are inconsistent (e.g. a duplicate field)."""


class UnknownNameError(SgconfError, KeyError):
    """Raised when a name is looked up among a fixed set of choices (a shipped model, a policy) that lacks it."""

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0]) if self.args else ""


class UnknownPluginError(UnknownNameError):
    """Raised when a registry (`sgconf.plugins.Registry`) holds no entry under the name asked for."""


class BadArgument(SgconfError, TypeError):
    """Raised when a function is called with arguments it cannot take: not a record of a schema, neither of two alternatives."""


class ReadOnlyError(SgconfError, TypeError):
    """Raised when a published config value (a frozen mapping or list) is written to in place."""


class UndeclaredReadError(DeclarationError):
    """Raised when a rule or resolution step reads a field it does not declare (`Rule.fields`, `Step.reads`)."""


class FieldValueError(SgconfError, ValueError):
    """Raised by a field check; the message is lowercase and says what was expected.

    A check may raise this or a plain `ValueError`: either becomes a problem naming the
    field, the value and its source.
    """


class ConversionError(SgconfError, ValueError):
    """Raised for one value that does not fit its field's type; the message says what was expected.

    The message may quote the value: a key, an item, a parser's complaint. `item` says,
    quoting nothing, what the failing item of a container should have been ("an
    integer"), so a secret field's message can still say it without naming the item.
    """

    def __init__(self, message: str, *, item: str | None = None) -> None:
        super().__init__(message)
        self.item = item


__all__ = [
    "BadArgument",
    "ConfigError",
    "ConversionError",
    "DeclarationError",
    "FieldValueError",
    "OverrideRefused",
    "PluginUnavailable",
    "Problem",
    "ReadOnlyError",
    "ResolutionError",
    "SgconfError",
    "UnknownFieldError",
    "UndeclaredReadError",
    "UnknownNameError",
    "UnknownPluginError",
    "UsageError",
]
