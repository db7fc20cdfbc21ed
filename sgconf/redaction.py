"""Redaction of secrets: the one rule for how a secret value may be shown, used by every output.

A secret that is set shows as `***`; an unset one (None) shows as None, so an operator can
still tell "no key" from "a key". Dumps, error messages, log events, `explain()`,
receipts, events, HTTP answers and the replica-group reports all show values through
`redact` (or `FieldInfo.shown`, which calls it); comparisons and digests use the real value.
"""

from __future__ import annotations

from typing import Any

REDACTED = "***"


def redact(value: Any, secret: bool) -> Any:
    """`value` as it may be shown: `'***'` for a set secret, the value itself otherwise."""
    return REDACTED if secret and value is not None else value


__all__ = ["REDACTED", "redact"]
