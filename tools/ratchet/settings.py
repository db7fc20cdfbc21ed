"""Scan settings and the cheap pre-parse steps (decoding, the text prefilter).

Kept apart from the scanner so the cheap steps stay cheap to import and to read.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence

import attrs

ALLOW_MARKER = "ratchet: allow"


@attrs.frozen(slots=True)
class ScanSettings:
    """What the scanner needs to know, picklable so worker processes get a copy."""

    record_type: str = "ServerArgs"
    getters: frozenset[str] = frozenset({"get_server_args"})
    attributes: frozenset[str] = frozenset({"server_args"})
    parameters: frozenset[str] = frozenset({"server_args"})
    fields: frozenset[str] = frozenset()
    #: every class name whose instances are the record: `record_type`, the schema's own,
    #: and the subclasses and aliases declared in the scanned tree
    record_types: frozenset[str] = frozenset({"ServerArgs"})
    #: names the project's code calls its schema by (`SCHEMA.build(...)`, `SCHEMA.load(...).record`)
    schemas: frozenset[str] = frozenset()
    #: the oldest Python the project runs on ("" accepts every grammar the parsers know)
    target_version: str = ""

    @property
    def tokens(self) -> tuple[str, ...]:
        """Texts one of which a file must contain to possibly hold a read or an allow comment."""
        names = {self.record_type, *self.record_types, *self.schemas, *self.getters, *self.attributes, *self.parameters}
        return tuple(sorted({*names, ALLOW_MARKER}))

    def fingerprint(self) -> str:
        parts = [self.record_type, *sorted(self.getters), "|", *sorted(self.attributes), "|"]
        parts += [*sorted(self.parameters), "|", *sorted(self.fields), "|", *sorted(self.record_types), "|"]
        parts += [*sorted(self.schemas), "|", self.target_version]
        return "\x1f".join(parts)


def may_contain_read(text: str, tokens: Sequence[str]) -> bool:
    """The text prefilter: without any token there can be no base to read a field from."""
    return any(token in text for token in tokens)


def decode(data: bytes) -> str:
    """Decode source bytes as Python does (UTF-8, or the PEP 263 coding cookie); raises on failure."""
    return decode_with_encoding(data)[0]


def decode_with_encoding(data: bytes) -> tuple[str, str]:
    """The text and the encoding to write it back with (so a rewrite keeps a file's encoding).

    Raises UnicodeDecodeError, SyntaxError (a bad cookie) or LookupError (an unknown codec).
    """
    first = data.find(b"\n")
    second = data.find(b"\n", first + 1) if first >= 0 else -1
    head = data if second < 0 else data[:second]
    if b"coding" not in head and not data.startswith(codecs.BOM_UTF8):
        return data.decode("utf-8"), "utf-8"
    # a cookie (or a BOM) decides, as it does for Python: a misspelt one is an error
    import io
    import tokenize

    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding), encoding
