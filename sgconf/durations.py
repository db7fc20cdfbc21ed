"""The one spelling of a `datetime.timedelta` setting: `30s`, `1h30m`, `250ms`, ISO 8601 `PT1M30S`, or seconds.

A timeout read from a flag, a variable or a config file is text or a number; TOML and
JSON have no duration type. Parsing and printing live together so that what a dump
writes is what a load reads back equal.
"""

from __future__ import annotations

import datetime
import math
import re

from sgconf.errors import ConversionError

_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|us|d|h|m|s)")
_ISO = re.compile(r"P(?:(\d+(?:\.\d+)?)D)?(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)?")

FORMAT = "a duration such as 30s, 1h30m, 250ms or PT1M30S (a bare number is seconds)"


def parse_duration(text: str) -> datetime.timedelta:
    """`text` as a duration; ValueError saying the accepted spellings when it is none of them."""
    body = text.strip().replace("_", "")
    sign = -1.0 if body.startswith("-") else 1.0
    body = body.lstrip("+-").strip()
    seconds = _seconds(body)
    if seconds is None:
        raise ConversionError(f"expected {FORMAT}")
    return from_seconds(sign * seconds)


def from_seconds(seconds: float) -> datetime.timedelta:
    """A number of seconds as a duration; ValueError when it is not finite or out of range."""
    if not math.isfinite(seconds):
        raise ConversionError("expected a finite number of seconds")
    try:
        return datetime.timedelta(seconds=seconds)
    except OverflowError:
        raise ConversionError("a duration out of range") from None


def _seconds(body: str) -> float | None:
    try:
        return float(body) if body else None
    except ValueError:
        pass
    iso = _ISO.fullmatch(body.upper())
    if iso is not None and body.upper() not in ("P", "PT") and not body.upper().endswith("T"):
        days, hours, minutes, secs = (float(g) if g else 0.0 for g in iso.groups())
        return days * 86400 + hours * 3600 + minutes * 60 + secs
    parts = _PART.findall(body.lower().replace(" ", ""))
    if not parts or "".join(n + u for n, u in parts) != body.lower().replace(" ", ""):
        return None
    return sum(float(n) * _UNITS[u] for n, u in parts)


def format_duration(value: datetime.timedelta) -> str:
    """The compact spelling `parse_duration` reads back equal: `1h30m`, `0.25s`, `-5s`, `0s`."""
    micros = (value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds
    sign = "-" if micros < 0 else ""
    micros = abs(micros)
    whole, frac = divmod(micros, 1_000_000)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    out = "".join(f"{n}{u}" for n, u in ((days, "d"), (hours, "h"), (minutes, "m")) if n)
    if secs or frac or not out:
        out += f"{secs}.{frac:06d}".rstrip("0").rstrip(".") + "s"
    return sign + out


__all__ = ["FORMAT", "format_duration", "from_seconds", "parse_duration"]
