"""Mutants of one source file: their stable keys, and the code object of each.

A mutant's key names the file, the enclosing scope and the edit, never the line, so an
entry in the equivalents file survives edits elsewhere in the module. Two identical
edits in one scope are told apart by their order (`(#2)`).
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import CodeType

import attrs

from tools.mutation.operators import Mutation, apply_mutation, list_mutations


@attrs.frozen(slots=True)
class Mutant:
    """One mutation of one module: `path` is relative to the repository root, POSIX style."""

    path: str
    module: str
    mutation: Mutation
    key: str

    @property
    def index(self) -> int:
        return self.mutation.index

    @property
    def line(self) -> int:
        return self.mutation.line

    def location(self) -> str:
        """`path:line scope: before -> after` (and `(#n)` for a twin), as the report prints a survivor.

        It is the key with the line number added, so an equivalents entry is the line without it.
        """
        return f"{self.path}:{self.line} {self.key[len(self.path) + 1 :]}"


def module_name(path: str) -> str:
    """The import name of a repository-relative path: `sgconf/rules.py` -> `sgconf.rules`."""
    parts = list(Path(path).with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def mutants_of(root: Path, path: str) -> list[Mutant]:
    """Every mutant of the file at `root / path`, in offer order."""
    source = (root / path).read_text(encoding="utf-8")
    mutations = list_mutations(ast.parse(source, filename=path))
    seen: dict[str, int] = {}
    out = []
    for mutation in mutations:
        key = f"{path} {mutation.scope}: {mutation.description}"
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > 1:
            key = f"{key} (#{seen[key]})"
        out.append(Mutant(path=path, module=module_name(path), mutation=mutation, key=key))
    return out


def mutant_code(root: Path, path: str, index: int) -> CodeType:
    """The compiled module with mutation `index` applied; line numbers are the original ones.

    Raises IndexError for a mutation the file does not have and SyntaxError when the
    mutated tree does not compile.
    """
    filename = str(root / path)
    tree = ast.parse((root / path).read_text(encoding="utf-8"), filename=filename)
    return compile(apply_mutation(tree, index), filename, "exec", dont_inherit=True)


__all__ = ["Mutant", "module_name", "mutant_code", "mutants_of"]
