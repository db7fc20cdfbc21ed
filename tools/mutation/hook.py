"""An import hook that serves one module's mutated code in place of its source.

Installed first on `sys.meta_path` before the tests import anything of the project, so
every importer of the module, direct or through a package's re-exports, gets the
mutant; the file on disk is never touched, so two mutants can run at once.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import CodeType, ModuleType

from tools.mutation.errors import AlreadyImported


class _MutantLoader(importlib.machinery.SourceFileLoader):
    """A source loader whose code is the mutant's (no bytecode cache is read or written)."""

    def __init__(self, fullname: str, path: str, code: CodeType) -> None:
        super().__init__(fullname, path)
        self._code = code

    def get_code(self, fullname: str) -> CodeType:
        return self._code


class MutantFinder(importlib.abc.MetaPathFinder):
    """Finds exactly one module name and hands out the mutated code for it."""

    def __init__(self, module: str, path: Path, code: CodeType) -> None:
        self.module = module
        self.path = path
        self.code = code

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != self.module:
            return None
        package = [str(self.path.parent)] if self.path.name == "__init__.py" else None
        return importlib.util.spec_from_file_location(
            fullname,
            str(self.path),
            loader=_MutantLoader(fullname, str(self.path), self.code),
            submodule_search_locations=package,
        )


def is_mutant(module: ModuleType) -> bool:
    """Whether `module` was loaded from a mutant's code."""
    spec = getattr(module, "__spec__", None)
    return isinstance(getattr(spec, "loader", None), _MutantLoader)


def install(module: str, path: Path, code: CodeType) -> MutantFinder:
    """Serve `code` for `module` from now on.

    Raises AlreadyImported (a RuntimeError) when the module is already imported: its importers would keep
    the original code and the mutant would be judged on tests that never ran it.
    """
    if module in sys.modules:
        raise AlreadyImported(f"{module} is already imported, so a mutant of it would not be seen by the tests")
    finder = MutantFinder(module, path, code)
    sys.meta_path.insert(0, finder)
    return finder


__all__ = ["MutantFinder", "install", "is_mutant"]
