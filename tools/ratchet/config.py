"""`ratchet.toml`: the `[config]` table, `[[exempt]]` entries and the `[counts."path"]` baseline.

Paths in the file are relative to the directory holding it (the repository root), in
POSIX form, so the baseline is the same on every machine.
"""

from __future__ import annotations

import difflib
import importlib
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from tools import toml as tomllib
from tools.ratchet.errors import RatchetConfigError
from tools.ratchet.fieldsource import SourceFacts, facts_of, is_schema
from tools.ratchet.settings import ScanSettings
from tools.ratchet.sites import KINDS

CONFIG_NAME = "ratchet.toml"
_TABLES = ("config", "exempt", "unread", "counts")
_VERSION = re.compile(r"3\.\d{1,2}")

# key -> (type, default); lists are stored as tuples. README.md has the reference table.
_CONFIG_KEYS: dict[str, tuple[type, Any]] = {
    "field_source": (str, ""),
    "fields": (list, ()),
    "record_type": (str, ""),
    "getters": (list, ("get_server_args",)),
    "attributes": (list, ("server_args",)),
    "parameters": (list, ("server_args",)),
    "schema_names": (list, ()),
    "derived": (list, ()),
    "hot_field_source": (str, ""),
    "accessor_source": (str, ""),
    "accessor_module": (str, ""),
    "one_record_per_process": (bool, False),
    "target_version": (str, ""),
    "include": (list, ("**/*.py",)),
    "exclude": (list, ()),
    "cache_dir": (str, ".sgconf-ratchet-cache"),
}

NO_FIELD_SOURCE = (
    "{name} names no field source, so the ratchet does not know your record's fields -- "
    'add `field_source = "your_package.config:SCHEMA"` under [config] (or list them in `fields`)'
)


@attrs.frozen(slots=True)
class Exempt:
    """A (path, field) pair that is not counted, with the reason it is legitimate.

    `path` may be a glob and `field` may be `*`; writes are never exempt.
    """

    path: str
    field: str
    reason: str

    def covers(self, path: str, field: str) -> bool:
        return (self.field == "*" or self.field == field) and glob_match(self.path, path)


def exempt_entry(entries: Sequence[Exempt], path: str, kind: str, field: str) -> Exempt | None:
    """The exemption covering a site; writes are never exempt."""
    if kind == "write":
        return None
    for entry in entries:
        if entry.covers(path, field):
            return entry
    return None


@attrs.frozen(slots=True)
class UnreadAllow:
    """A declared field that may have no reader yet (`[[unread.allow]]`), and why."""

    field: str
    reason: str


@attrs.frozen(slots=True)
class RatchetConfig:
    """A loaded `ratchet.toml`: settings, exemptions and the per-file, per-kind baseline."""

    file: Path
    field_source: str = ""
    fields: tuple[str, ...] = ()
    record_type: str = ""
    getters: tuple[str, ...] = ("get_server_args",)
    attributes: tuple[str, ...] = ("server_args",)
    parameters: tuple[str, ...] = ("server_args",)
    schema_names: tuple[str, ...] = ()
    derived: tuple[str, ...] = ()
    hot_field_source: str = ""
    accessor_source: str = ""
    accessor_module: str = ""
    one_record_per_process: bool = False
    target_version: str = ""
    include: tuple[str, ...] = ("**/*.py",)
    exclude: tuple[str, ...] = ()
    cache_dir: str = ".sgconf-ratchet-cache"
    exempt: tuple[Exempt, ...] = ()
    unread_allow: tuple[UnreadAllow, ...] = ()
    counts: dict[str, dict[str, int]] = attrs.field(factory=dict)
    reasons: dict[str, str] = attrs.field(factory=dict)
    _facts: list[SourceFacts] = attrs.field(factory=list, eq=False, repr=False)

    @property
    def root(self) -> Path:
        return self.file.parent

    def facts(self) -> SourceFacts:
        """What the field source knows, loaded once; refuses when none is configured."""
        if self._facts:
            return self._facts[0]
        if self.field_source:
            obj = self._load_object(self.field_source, "field_source")
            try:
                facts = facts_of(obj, self.field_source)
            except Exception as exc:
                msg = f"field_source '{self.field_source}' failed: {type(exc).__name__}: {exc}"
                raise RatchetConfigError(msg + " -- fix it or list the names in [config] fields") from None
        elif self.fields:
            facts = SourceFacts(tuple(self.fields))
        else:
            raise RatchetConfigError(NO_FIELD_SOURCE.format(name=self.file.name))
        self._facts.append(facts)
        return facts

    @property
    def record_name(self) -> str:
        """The record class the messages name: `record_type`, else the schema's, else ServerArgs."""
        if self.record_type:
            return self.record_type
        types = self.facts().record_types
        return types[0] if types else "ServerArgs"

    def field_names(self) -> list[str]:
        """The declared fields, minus derived members: inline `fields`, else the field source."""
        names = list(self.fields) if self.fields else list(self.facts().names)
        derived = set(self.derived)
        return [n for n in names if n not in derived]

    def hot_field_names(self) -> set[str]:
        """The declared fields that may change after publish: `hot_field_source`, else the schema's."""
        if self.hot_field_source:
            source = self._load_callable(self.hot_field_source, "hot_field_source")
            try:
                return {str(n) for n in source()}
            except Exception as exc:
                msg = f"hot_field_source '{self.hot_field_source}' failed: {type(exc).__name__}: {exc}"
                raise RatchetConfigError(msg + " -- point it at a callable returning the hot field names") from None
        hot = self.facts().hot
        if hot is None:
            msg = f"field_source '{self.field_source}' gives names only, so the hot fields are unknown"
            raise RatchetConfigError(msg + " -- point field_source at your schema, or set hot_field_source")
        return set(hot)

    def accessors(self, names: Sequence[str]) -> dict[str, str | None]:
        """The accessor expression for each field (None where the source has none or fails).

        Raises RatchetConfigError when `accessor_source` cannot be loaded: a typo there would
        otherwise quietly turn every suggestion into "use the field's accessor".
        """
        source: Callable[[str], Any] | None
        source = self._load_callable(self.accessor_source, "accessor_source") if self.accessor_source else None
        if source is None:
            source = self.facts().accessor if (self.field_source or not self.fields) else None
        out: dict[str, str | None] = {}
        for name in names:
            try:
                value = source(name) if source is not None else None
            except Exception:
                value = None
            out[name] = str(value) if value else None
        return out

    def module_for_accessors(self) -> str | None:
        """Where `fix` imports accessors from: `accessor_module`, else the schema's."""
        if self.accessor_module:
            return self.accessor_module
        return self.facts().accessor_module if self.field_source else None

    def settings(self) -> ScanSettings:
        facts = self.facts()
        record_type = self.record_name
        schemas = set(self.schema_names)
        if facts.schema_name:
            schemas.add(facts.schema_name)
        return ScanSettings(
            record_type=record_type,
            getters=frozenset(self.getters),
            attributes=frozenset(self.attributes),
            parameters=frozenset(self.parameters),
            fields=frozenset(self.field_names()),
            record_types=frozenset({record_type, *facts.record_types}),
            schemas=frozenset(schemas),
            target_version=self.target_version,
        )

    def _load_callable(self, spec: str, key: str) -> Callable[..., Any]:
        obj = self._load_object(spec, key)
        if not callable(obj):
            raise RatchetConfigError(f"[config] {key} '{spec}' is not callable -- point it at a function")
        return obj  # type: ignore[no-any-return]

    def _load_object(self, spec: str, key: str) -> Any:
        module_name, sep, attr = spec.partition(":")
        if not sep or not module_name or not attr:
            raise RatchetConfigError(
                f"[config] {key} must look like 'module:name' (got '{spec}' from {self.file.name})"
            )
        root = str(self.root)
        added = root not in sys.path
        if added:
            sys.path.insert(0, root)
        try:
            obj: Any = importlib.import_module(module_name)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except Exception as exc:
            msg = f"cannot load [config] {key} '{spec}' from {self.file.name}: {type(exc).__name__}: {exc}"
            raise RatchetConfigError(msg + " -- point it at an importable 'module:name'") from None
        finally:
            if added:
                sys.path.remove(root)
        if key == "field_source" and not (callable(obj) or is_schema(obj)):
            raise RatchetConfigError(
                f"[config] field_source '{spec}' is neither a schema nor callable -- point it at your Schema"
            )
        return obj


def find_config(start: Path) -> Path:
    """The nearest `ratchet.toml` in `start` or a parent directory."""
    start = start.resolve()
    for folder in (start, *start.parents):
        candidate = folder / CONFIG_NAME
        if candidate.is_file():
            return candidate
    raise RatchetConfigError(f"no {CONFIG_NAME} found in {start} or its parents -- pass --config PATH")


def _unknown(key: str, where: str, known: Sequence[str]) -> RatchetConfigError:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return RatchetConfigError(f"unknown key '{key}' in {where}{hint} -- known keys: {', '.join(sorted(known))}")


def load_config(path: Path) -> RatchetConfig:
    """Read and validate `ratchet.toml`; every problem raises `RatchetConfigError` naming the key."""
    path = path.resolve()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RatchetConfigError(f"cannot read {path}: {exc.strerror} -- pass --config PATH") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise RatchetConfigError(f"{path.name} is not valid TOML: {exc}") from None
    for key in data:
        if key not in _TABLES:
            raise _unknown(key, path.name, list(_TABLES))
    kwargs: dict[str, Any] = {}
    for key, value in _table(data, "config", path.name).items():
        if key not in _CONFIG_KEYS:
            raise _unknown(key, "[config]", list(_CONFIG_KEYS))
        expected, _ = _CONFIG_KEYS[key]
        if expected is list:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise RatchetConfigError(f"[config] {key} must be a list of strings (got {value!r})")
            value = tuple(value)
        elif expected is bool:
            if not isinstance(value, bool):
                raise RatchetConfigError(f"[config] {key} must be true or false (got {value!r})")
        elif not isinstance(value, str) or not value:
            raise RatchetConfigError(f"[config] {key} must be a non-empty string (got {value!r})")
        elif key == "target_version" and not _VERSION.fullmatch(value):
            raise RatchetConfigError(
                f"[config] target_version must look like '3.12' (got {value!r}) -- name the oldest Python the project runs on"
            )
        kwargs[key] = value
    exempt = _load_exempt(data.get("exempt", []))
    unread_allow = _load_unread(_table(data, "unread", path.name))
    counts, reasons = _load_counts(_table(data, "counts", path.name))
    return RatchetConfig(file=path, exempt=exempt, unread_allow=unread_allow, counts=counts, reasons=reasons, **kwargs)


def _table(data: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise RatchetConfigError(f"'{key}' in {where} must be a table")
    return value


def _load_exempt(raw: Any) -> tuple[Exempt, ...]:
    if not isinstance(raw, list):
        raise RatchetConfigError(
            "'exempt' must be an array of tables: [[exempt]] path = ..., field = ..., reason = ..."
        )
    out = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict):
            raise RatchetConfigError(f"[[exempt]] #{i + 1} must be a table")
        for key in entry:
            if key not in ("path", "field", "reason"):
                raise _unknown(key, f"[[exempt]] #{i + 1}", ["path", "field", "reason"])
        values = {k: entry.get(k) for k in ("path", "field", "reason")}
        for key, value in values.items():
            if not isinstance(value, str) or not value.strip():
                msg = f"[[exempt]] #{i + 1} needs a non-empty '{key}'"
                raise RatchetConfigError(
                    msg + " -- an exemption names the file, the field and why the raw read is legitimate"
                )
        out.append(Exempt(values["path"], values["field"], values["reason"]))  # type: ignore[arg-type]
    return tuple(out)


def _load_unread(raw: dict[str, Any]) -> tuple[UnreadAllow, ...]:
    for key in raw:
        if key != "allow":
            raise _unknown(key, "[unread]", ["allow"])
    entries = raw.get("allow", [])
    if not isinstance(entries, list):
        raise RatchetConfigError(
            "[unread] allow must be an array of tables: [[unread.allow]] field = ..., reason = ..."
        )
    out = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        where = f"[[unread.allow]] #{i + 1}"
        if not isinstance(entry, dict):
            raise RatchetConfigError(f"{where} must be a table with 'field' and 'reason'")
        for key in entry:
            if key not in ("field", "reason"):
                raise _unknown(key, where, ["field", "reason"])
        for key in ("field", "reason"):
            value = entry.get(key)
            if not isinstance(value, str) or not value.strip():
                msg = f"{where} needs a non-empty '{key}' (got {value!r} from {CONFIG_NAME})"
                raise RatchetConfigError(msg + " -- name the field and say why nothing reads it yet")
        if entry["field"] in seen:
            raise RatchetConfigError(f"{where}: field '{entry['field']}' is listed twice -- keep one entry")
        seen.add(entry["field"])
        out.append(UnreadAllow(entry["field"], entry["reason"].strip()))
    return tuple(out)


def _load_counts(raw: dict[str, Any]) -> tuple[dict[str, dict[str, int]], dict[str, str]]:
    counts: dict[str, dict[str, int]] = {}
    reasons: dict[str, str] = {}
    for path, table in raw.items():
        if not isinstance(table, dict):
            raise RatchetConfigError(f'[counts."{path}"] must be a table of kind = count')
        per_kind: dict[str, int] = {}
        for kind, value in table.items():
            if kind == "reason" and isinstance(value, str):
                reasons[path] = value
                continue
            if kind not in KINDS:
                raise _unknown(kind, f'[counts."{path}"]', [*KINDS, "reason"])
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise RatchetConfigError(f'[counts."{path}"] {kind} must be a count >= 0 (got {value!r})')
            per_kind[kind] = value
        counts[path] = per_kind
    return counts, reasons


_GLOB_CACHE: dict[str, re.Pattern[str]] = {}


def glob_regex(pattern: str) -> re.Pattern[str]:
    """Translate a path glob (`**` any depth, `*` and `?` within one segment) to a regex."""
    cached = _GLOB_CACHE.get(pattern)
    if cached is not None:
        return cached
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    compiled = re.compile("".join(out) + r"\Z")
    _GLOB_CACHE[pattern] = compiled
    return compiled


def glob_match(pattern: str, path: str) -> bool:
    return glob_regex(pattern).match(path) is not None


def glob_prefix(pattern: str) -> str:
    """The literal leading directory of a glob: where a walk for it has to start."""
    parts = []
    for part in pattern.split("/")[:-1]:
        if any(ch in part for ch in "*?["):
            break
        parts.append(part)
    return "/".join(parts)
