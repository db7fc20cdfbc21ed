"""`mutation.toml` (modules to mutate and the tests that cover each) and the equivalents file.

Paths are relative to the directory holding `mutation.toml` (the repository root), in
POSIX form. The equivalents file lists, one a line, mutants that cannot change
behaviour: the mutant's key as the report prints it (without the line number), then
` -- ` and why. Blank lines and lines starting with `#` are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from tools import toml as tomllib
from tools.mutation.errors import MutationConfigError
from tools.mutation.mutants import Mutant

CONFIG_NAME = "mutation.toml"

# key -> (type, default)
_SETTINGS: dict[str, tuple[type, Any]] = {
    "workers": (int, 2),
    "threshold": (float, 95.0),
    "timeout_factor": (float, 4.0),
    "timeout_min_s": (float, 20.0),
    "equivalents": (str, ""),
    "preload": (list, ()),
    "pytest_args": (list, ("-x", "-q", "--tb=no", "--no-header", "-p", "no:randomly")),
}


@attrs.frozen(slots=True)
class Target:
    """A module to mutate and the test files that must kill its mutants."""

    path: str
    tests: tuple[str, ...]


@attrs.frozen(slots=True)
class MutationConfig:
    """A loaded `mutation.toml`."""

    root: Path
    targets: tuple[Target, ...]
    workers: int = 2
    threshold: float = 95.0
    timeout_factor: float = 4.0
    timeout_min_s: float = 20.0
    equivalents: str = ""
    preload: tuple[str, ...] = ()
    pytest_args: tuple[str, ...] = ()

    def target(self, path: str) -> Target:
        """The target for `path`; raises MutationConfigError naming the configured ones."""
        wanted = Path(path).as_posix().removeprefix("./")
        for target in self.targets:
            if target.path == wanted:
                return target
        names = ", ".join(t.path for t in self.targets)
        raise MutationConfigError(f"'{path}' is not a module of {CONFIG_NAME} -- pick one of: {names}")


def _typed(name: str, value: Any, kind: type) -> Any:
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if kind is list:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise MutationConfigError(f"{CONFIG_NAME}: 'config.{name}' must be a list of strings (got {value!r})")
        return tuple(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise MutationConfigError(f"{CONFIG_NAME}: 'config.{name}' must be {kind.__name__} (got {value!r})")
    return value


def parse_config(data: Mapping[str, Any], root: Path) -> MutationConfig:
    """Check and convert the parsed TOML; raises MutationConfigError naming the bad key."""
    unknown = sorted(set(data) - {"config", "modules"})
    if unknown:
        raise MutationConfigError(f"{CONFIG_NAME}: unknown table {unknown[0]!r} -- use [config] and [modules]")
    settings: dict[str, Any] = {}
    for name, value in dict(data.get("config", {})).items():
        if name not in _SETTINGS:
            raise MutationConfigError(
                f"{CONFIG_NAME}: unknown key 'config.{name}' -- known keys: {', '.join(_SETTINGS)}"
            )
        settings[name] = _typed(name, value, _SETTINGS[name][0])
    if settings.get("workers", 1) < 1:
        raise MutationConfigError(f"{CONFIG_NAME}: 'config.workers' must be at least 1 (got {settings['workers']})")
    modules = data.get("modules", {})
    if not modules:
        raise MutationConfigError(
            f'{CONFIG_NAME}: no modules to mutate -- add \'"pkg/module.py" = ["tests/..."]\' under [modules]'
        )
    targets = []
    for path, tests in modules.items():
        if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
            raise MutationConfigError(f"{CONFIG_NAME}: module '{path}' must list its test files (got {tests!r})")
        for rel in (path, *tests):
            if not (root / rel).exists():
                raise MutationConfigError(f"{CONFIG_NAME}: '{rel}' does not exist under {root} -- fix the path")
        targets.append(Target(path=path, tests=tuple(tests)))
    defaults = {name: default for name, (_, default) in _SETTINGS.items()}
    return MutationConfig(root=root, targets=tuple(targets), **{**defaults, **settings})


def load_config(path: Path) -> MutationConfig:
    """Read `mutation.toml`; raises MutationConfigError for a missing, unreadable or ill-formed file."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise MutationConfigError(
            f"cannot read {path}: {exc.strerror} -- run from the repository root or pass --config"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise MutationConfigError(f"{path} is not valid TOML: {exc} -- fix the file") from None
    return parse_config(data, path.resolve().parent)


@attrs.frozen(slots=True)
class Equivalent:
    """An entry of the equivalents file: the mutant it names (its key and reason) and where it is written."""

    text: str
    line: int

    @property
    def path(self) -> str:
        return self.text.split(" ", 1)[0]

    def names(self, mutant: Mutant) -> bool:
        return self.text.startswith(mutant.key + " -- ")


def load_equivalents(path: Path) -> tuple[Equivalent, ...]:
    """The entries of an equivalents file (none when it does not exist).

    Raises MutationConfigError for an entry without a reason.
    """
    if not path.exists():
        return ()
    entries = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        _, sep, reason = text.partition(" -- ")
        if not sep or not reason.strip():
            raise MutationConfigError(
                f"{path.name}:{number}: no reason given for {text!r} -- end the line with ' -- why no test can tell it apart'"
            )
        entries.append(Equivalent(text=text, line=number))
    return tuple(entries)


def match_equivalents(entries: Sequence[Equivalent], mutants: Sequence[Mutant]) -> tuple[set[str], list[Equivalent]]:
    """The keys of `mutants` that an entry names, and the entries for these files that name none (stale)."""
    paths = {m.path for m in mutants}
    matched: set[str] = set()
    stale = []
    for entry in entries:
        if entry.path not in paths:
            continue
        # the longest key wins, so `... (#2)` is not taken for its first twin
        hits = [m.key for m in mutants if entry.names(m)]
        if hits:
            matched.add(max(hits, key=len))
        else:
            stale.append(entry)
    return matched, stale


__all__ = [
    "CONFIG_NAME",
    "Equivalent",
    "MutationConfig",
    "Target",
    "load_config",
    "load_equivalents",
    "match_equivalents",
    "parse_config",
]
