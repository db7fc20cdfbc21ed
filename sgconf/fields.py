"""Field declarations: `setting()` wraps `attrs.field` with the metadata every layer needs.

A declaration says, once, everything about a leaf: its default, help text, choices,
validators, whether it is secret, whether it may change after publish (`hot`) or only
from named sources (`allow_sources`), how a change after publish takes effect
(`apply`), its CLI flag and the short aliases users type (`--tp` for `--tp-size`), and
whether it counts towards the context fingerprint.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import attrs

from sgconf.errors import DeclarationError, FieldValueError

META_KEY = "sgconf"

# How a change after publish takes effect; the serving layer decides from this, never from
# a list of endpoints:
#   step     between two scheduler steps, under load (no step sees two generations)
#   drain    needs an idle engine: admission pauses, running requests finish, then it applies
#   restart  refused after publish; set it at launch
ApplyMode = Literal["step", "drain", "restart"]
APPLY_MODES: tuple[ApplyMode, ...] = ("step", "drain", "restart")


@attrs.frozen(slots=True)
class FieldSpec:
    """Metadata of one declared field, attached to its attrs attribute."""

    help: str
    secret: bool = False
    hot: bool = False
    cli: str | None = None
    aliases: tuple[str, ...] = ()
    inverse_aliases: tuple[str, ...] = ()
    allow_sources: tuple[str, ...] = ()
    fingerprint: bool = True
    choices: tuple[Any, ...] | None = None
    checks: tuple[Callable[[Any], None], ...] = ()
    apply: ApplyMode = "restart"
    # the registry the value names an entry of (`sgconf.plugins.Registry`), or None
    plugin: Any = None
    # a float setting that accepts inf, -inf and nan (others refuse them at every layer)
    nonfinite: bool = False

    def source_allowed(self, source: str) -> bool:
        """Whether `source` may override this field after publish (hot fields allow any)."""
        if self.hot:
            return True
        return any(fnmatch.fnmatchcase(source, pat) for pat in self.allow_sources)


class _Required:
    """The default of a setting that has none: a launch input must set it, or loading refuses."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<required>"

    def __reduce__(self) -> str:
        return "REQUIRED"  # one instance, also across pickling


#: `setting(REQUIRED, help=...)`: no default; `load` and `build` refuse a record without it,
#: naming the flag and the environment variable that would set it
REQUIRED: Any = _Required()


def setting(
    default: Any = attrs.NOTHING,
    *,
    help: str,
    secret: bool = False,
    hot: bool = False,
    cli: str | None = None,
    aliases: Sequence[str] = (),
    inverse_aliases: Sequence[str] = (),
    allow_sources: Sequence[str] = (),
    fingerprint: bool | None = None,
    checks: Sequence[Callable[[Any], None]] = (),
    factory: Callable[[], Any] | None = None,
    apply: ApplyMode | None = None,
    plugin: Any = None,
    nonfinite: bool = False,
) -> Any:
    """Declare a config leaf; see the module docstring for what each option means.

    Secrets never count towards the fingerprint unless asked, so a hash of the config
    can be logged without leaking them. `plugin` names the `sgconf.plugins.Registry` whose
    entries the value must name: checked when converted, listed in `--help` and the
    JSON Schema. A float field refuses inf and nan unless it declares `nonfinite=True` (a
    limit that may be unbounded). A boolean field may also take `inverse_aliases`: flags that mean its
    opposite, the way another runtime names the same switch (`--enable-prefix-caching`
    for `--no-disable-radix-cache`); each comes with its `--no-` form.
    """
    mode: ApplyMode = apply if apply is not None else ("step" if hot else "restart")
    if mode not in APPLY_MODES:
        raise DeclarationError(f"apply mode must be one of {', '.join(APPLY_MODES)}, got {mode!r}")
    if hot and mode == "restart":
        raise DeclarationError("a hot field cannot declare apply='restart' -- drop hot=True or pick step or drain")
    if mode != "restart" and not hot and not allow_sources:
        raise DeclarationError(
            f"apply={mode!r} needs hot=True or allow_sources: nothing could change the field after publish"
        )
    decl = FieldSpec(
        help=help,
        secret=secret,
        hot=hot,
        cli=cli,
        aliases=tuple(aliases),
        inverse_aliases=tuple(inverse_aliases),
        allow_sources=tuple(allow_sources),
        fingerprint=(not secret) if fingerprint is None else fingerprint,
        checks=(*checks, plugin.check) if plugin is not None else tuple(checks),
        apply=mode,
        plugin=plugin,
        nonfinite=nonfinite,
    )
    validator = _AttrsAdapter(decl.checks) if decl.checks else None
    if factory is not None:
        return attrs.field(factory=factory, metadata={META_KEY: decl}, validator=validator)
    return attrs.field(default=default, metadata={META_KEY: decl}, validator=validator)


@attrs.frozen(slots=True, repr=False)
class _AttrsAdapter:
    """Runs our value checks as an attrs validator so direct construction is checked too."""

    checks: tuple[Callable[[Any], None], ...]

    def __call__(self, inst: Any, attribute: attrs.Attribute, value: Any) -> None:
        for check in self.checks:
            try:
                check(value)
            except FieldValueError as exc:
                msg = f"'{attribute.name}' {exc} (got {value!r})"
                raise FieldValueError(msg) from None

    def __repr__(self) -> str:
        return "<" + ", ".join(repr(c) for c in self.checks) + ">"


# Validators: named factories returning small objects with a readable repr. ``None`` always
# passes: it means "not set, resolve later" and resolution decides.


@attrs.frozen(slots=True, repr=False)
class _Check:
    """A validator from a predicate: `message` when a set value fails `test`; None (unresolved) always passes.

    The predicate is a module-level function, so a setting that carries one pickles (a
    record crosses to replica processes) and shows by name in `sgconf schema`.
    """

    name: str
    test: Callable[[Any], bool]
    message: str

    def __call__(self, value: Any) -> None:
        if value is not None and not self.test(value):
            raise FieldValueError(self.message)

    def __repr__(self) -> str:
        return f"<{self.name} validator>"


def _is_power_of_two(value: Any) -> bool:
    return bool(value > 0 and not value & (value - 1))


def power_of_two() -> Callable[[Any], None]:
    """Value must be a positive power of two (1, 2, 4, ...)."""
    return _Check("power_of_two", _is_power_of_two, "must be a power of two")


@attrs.frozen(slots=True, repr=False)
class _Interval:
    low: float | None
    high: float | None
    low_open: bool
    high_open: bool

    def __call__(self, value: Any) -> None:
        if value is None:
            return
        both = self.low is not None and self.high is not None
        if isinstance(value, float) and math.isnan(value):
            # NaN compares false with every bound, so it would slip through the test below
            raise FieldValueError(f"must be a number {'in ' if both else ''}{self.describe()}, not nan")
        bad = (self.low is not None and (value <= self.low if self.low_open else value < self.low)) or (
            self.high is not None and (value >= self.high if self.high_open else value > self.high)
        )
        if bad:
            raise FieldValueError(f"must be {'in ' if both else ''}{self.describe()}")

    def describe(self) -> str:
        if self.high is None:
            return f"> {self.low}" if self.low_open else f">= {self.low}"
        if self.low is None:
            return f"< {self.high}" if self.high_open else f"<= {self.high}"
        left = "(" if self.low_open else "["
        right = ")" if self.high_open else "]"
        return f"{left}{self.low}, {self.high}{right}"

    def __repr__(self) -> str:
        return f"<interval {self.describe()} validator>"


def at_least(low: float) -> Callable[[Any], None]:
    """Value must be >= `low`."""
    return _Interval(low, None, False, False)


def positive() -> Callable[[Any], None]:
    """Value must be > 0."""
    return _Interval(0, None, True, False)


def interval(low: float, high: float, *, low_open: bool = False, high_open: bool = False) -> Callable[[Any], None]:
    """Value must lie in the interval; open ends exclude the bound."""
    return _Interval(low, high, low_open, high_open)


def _not_blank(value: Any) -> bool:
    return bool(str(value).strip())


def not_blank() -> Callable[[Any], None]:
    """A set value must hold something other than whitespace (a key of spaces guards nothing)."""
    return _Check("not_blank", _not_blank, "must not be empty or only whitespace")


def _is_host_port(value: Any) -> bool:
    name, sep, number = str(value).rpartition(":")
    return bool(sep and name and number.isdigit() and 0 < int(number) < 65536)


def host_port() -> Callable[[Any], None]:
    """Value must be a `host:port` string."""
    return _Check("host_port", _is_host_port, "must be 'host:port'")


def setting_of(attribute: attrs.Attribute) -> FieldSpec | None:
    """The FieldSpec attached to an attrs attribute, or None for undeclared members."""
    return attribute.metadata.get(META_KEY)
