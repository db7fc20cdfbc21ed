"""Redaction of secrets: the one rule for how a secret value may be shown, used by every output.

A secret that is set shows as `***`; an unset one (None) shows as None, so an operator can
still tell "no key" from "a key". Dumps, error messages, log events, `explain()`,
receipts, events, HTTP answers and the replica-group reports all show values through
`redact` (or `FieldInfo.shown`, which calls it); comparisons and digests use the real value.
"""

from __future__ import annotations

from typing import Any

from sgconf.fields import REQUIRED

REDACTED = "***"


def hidden(value: Any, secret: bool) -> bool:
    """Whether `value` is redacted when shown: it is a set value of a secret field.

    `REQUIRED` is no value (the field has none until the operator gives one), so a
    required secret says `<required>`, never `***`.

    Outputs that cannot print `***` in its place (a JSON Schema default, a conversion
    message that would quote a key of the value) ask this and leave the value out.
    """
    return secret and value is not None and value is not REQUIRED


def redact(value: Any, secret: bool) -> Any:
    """`value` as it may be shown: `'***'` for a set secret, the value itself otherwise."""
    return REDACTED if hidden(value, secret) else value


__all__ = ["REDACTED", "hidden", "redact"]
