"""Parsing any Python the project runs on, whatever Python the ratchet runs on.

Detection walks the stdlib `ast` (the C parser) because it is fast, but that parser only
knows the grammar of the interpreter it ships with. A file it refuses is parsed again
with libcst, whose parser knows newer grammar (PEP 695 type parameters and `type`
aliases, PEP 701 f-strings, `except*`), and the few constructs `ast` cannot read are
*lowered* in the text, character for character, into forms it can:

- type parameter lists (`def f[T](...)`, `class C[T]:`) become spaces;
- `type X[T] = value` becomes `X         = value` (the value keeps its columns);
- a string that holds a new-style f-string becomes a tuple of its embedded expressions,
  each left exactly where it was, with every other character blanked;
- `except*` loses its star (on interpreters older than 3.11).

Every expression keeps its line and column, so the `ast` walk reports the same sites
at the same places, and `fix` (which rewrites on libcst's own tree of the original
text) finds them again. A file libcst refuses too keeps the C parser's message.

`target_version` (the oldest Python the project runs on) makes newer syntax an error:
a project on 3.11 that writes `type X = int` hears so from the ratchet before its users do.
"""

from __future__ import annotations

import ast

from tools.ratchet.errors import NewSyntaxError

__all__ = ["NewSyntaxError", "parse_any"]


def parse_any(path: str, text: str, target_version: str = "") -> tuple[ast.Module, str]:
    """The module's `ast` tree and the text it was parsed from (the lowered text when lowering was needed).

    Raises SyntaxError (with the C parser's message when libcst refuses too), ValueError
    (NUL bytes), RecursionError or MemoryError, as `ast.parse` does. libcst is imported
    only for a file the C parser refuses.
    """
    try:
        return ast.parse(text, filename=path), text
    except SyntaxError as exc:
        first = exc
    from libcst import ParserSyntaxError

    from tools.ratchet.lowering import lower

    try:
        lowered = lower(text, target_version)
    except NewSyntaxError:
        raise
    except (ParserSyntaxError, RecursionError, ValueError):
        raise first from None
    if lowered is None:
        raise first
    try:
        return ast.parse(lowered, filename=path), lowered
    except SyntaxError:
        raise first from None
