"""Every exception the project raises on purpose derives from one root, `sgconf.errors.SgconfError`, declared in an errors.py.

Each package declares its exceptions in its own `errors.py` (`engine/errors.py`,
`engine/http/errors.py`, `tools/ratchet/errors.py` ...), so a caller finds every refusal
of a package in one place, and a class that replaced a builtin derives from both (so
`except ValueError` around an older call still works). Private classes (a leading
underscore) never leave the module that raises them: they are caught there and turned
into a public error, so they are exempt from where they live, not from the root.
`tools/` imports sgconf and nothing else of ours, so the ratchet's root (`RatchetError`)
derives from `SgconfError` too. The one exception is the mutation runner: it mutates
sgconf's modules, so it imports none of them, and `MutationError` is a root of its own.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from sgconf.errors import SgconfError

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sgconf", "runtime", "mem_cache", "attention", "engine", "tools")


def modules() -> list[ModuleType]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name == "__main__.py":  # runs a command on import
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found.append(importlib.import_module(name))
    return found


def exceptions_defined() -> list[type[BaseException]]:
    """Every exception class a module of ours defines, nested ones included, once each."""
    seen: dict[type[BaseException], None] = {}
    for module in modules():
        stack = list(vars(module).values())
        while stack:
            value = stack.pop()
            if not inspect.isclass(value) or value.__module__ != module.__name__:
                continue
            if issubclass(value, BaseException):
                seen[value] = None
            stack.extend(v for v in vars(value).values() if inspect.isclass(v) and v is not value)
    return list(seen)


def where(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def declared_in_errors(cls: type) -> bool:
    """Whether `cls` lives in an errors.py, or the errors.py of its package (or a parent's) re-exports it."""
    parts = cls.__module__.split(".")
    if parts[-1] == "errors":
        return True
    for depth in range(len(parts) - 1, 0, -1):
        try:
            errors = importlib.import_module(".".join(parts[:depth]) + ".errors")
        except ModuleNotFoundError:
            continue
        if getattr(errors, cls.__name__, None) is cls:
            return True
    return False


def test_every_exception_derives_from_the_root() -> None:
    """All but the mutation runner's, whose root is `MutationError` (it may import nothing of sgconf)."""
    from tools.mutation.errors import MutationError

    found = exceptions_defined()
    assert len(found) > 60
    outside = sorted(where(cls) for cls in found if not issubclass(cls, SgconfError))
    own = sorted(where(cls) for cls in found if issubclass(cls, MutationError))
    assert outside == own and "tools.mutation.errors.AlreadyImported" in own


@pytest.mark.slow
def test_the_mutation_runner_imports_nothing_it_mutates() -> None:
    """Every part of the runner a mutant's run loads leaves the project's packages unimported, so a mutant takes."""
    code = (
        "import sys, tools.mutation.execute, tools.mutation.child, tools.mutation.cli;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in {'sgconf', 'runtime', 'mem_cache', 'attention', 'engine'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_public_exception_is_declared_in_an_errors_module() -> None:
    found = [cls for cls in exceptions_defined() if not cls.__name__.startswith("_")]
    stray = sorted(where(cls) for cls in found if not declared_in_errors(cls))
    assert stray == []


def test_the_walk_sees_classes_outside_errors_modules() -> None:
    """The checks above can fail: a class declared elsewhere is found, and one off the root is reported."""
    names = {where(cls) for cls in exceptions_defined()}
    assert "engine.http.errors.HTTPProblem" in names and "tools.ratchet.errors.NewSyntaxError" in names
    stray = type("Stray", (ValueError,), {"__module__": "engine.engine"})
    assert not issubclass(stray, SgconfError) and not declared_in_errors(stray)


BUILTINS = ("ValueError", "TypeError", "KeyError", "RuntimeError", "TimeoutError")
# raises of a builtin that stay: programming errors of our own callers that no user input
# reaches (an allocator asked for a negative size), or exceptions caught where they are raised
ALLOWED_BUILTIN_RAISES = {
    "engine/memory_guard.py": 1,  # parse failure of /proc/meminfo, caught two lines below
    "engine/model.py": 1,  # a shape not built by runnable_shape(): our own caller's mistake
    "mem_cache/allocator.py": 9,
    "mem_cache/hicache/controller.py": 1,
    "mem_cache/hicache/file_storage.py": 1,
    "mem_cache/hicache/host_pool.py": 1,
    "mem_cache/hicache/layout.py": 3,
    "mem_cache/hicache/page_codec.py": 1,
    "mem_cache/hicache/prefix_keys.py": 1,
    "mem_cache/hicache/storage.py": 1,
    "mem_cache/kv_cache_configurator.py": 2,
    "mem_cache/pools.py": 7,
    "mem_cache/prefix_cache.py": 2,
    "runtime/accessors.py": 3,
    "runtime/context.py": 2,
    "runtime/snapshot.py": 1,
    "runtime/testing.py": 1,
    "tools/ratchet/rules.py": 1,
}


def builtin_raises() -> dict[str, int]:
    counts: dict[str, int] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                exc = node.exc if isinstance(node, ast.Raise) else None
                if isinstance(exc, ast.Call) and isinstance(exc.func, ast.Name) and exc.func.id in BUILTINS:
                    key = str(path.relative_to(ROOT))
                    counts[key] = counts.get(key, 0) + 1
    return counts


def test_builtin_exceptions_are_raised_only_where_no_user_meets_them() -> None:
    """A new `raise ValueError(...)` must be a project error, or be listed above with why it stays."""
    assert builtin_raises() == ALLOWED_BUILTIN_RAISES
