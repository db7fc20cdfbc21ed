"""Source layers: a config file, prefixed environment variables (`SGCONF_*`) and CLI flags, each read into raw values.

A layer only finds out *which* field a key names and *where* it came from; it does not
convert values. Conversion happens once, for every layer, in `sgconf.validation`, so a
string from the environment and a number from a TOML file go through the same
converter and fail with the same message. Problems a layer finds (unknown keys, a
file that does not parse) are returned, never raised, so loading can report every
problem of every layer together.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import attrs

try:
    import tomllib
except ImportError:  # python 3.10: the same parser, packaged separately
    import tomli as tomllib  # type: ignore[no-redef]

from sgconf.errors import Problem, SgconfError
from sgconf.provenance import Origin
from sgconf.suggest import did_you_mean

if TYPE_CHECKING:
    from sgconf.declarations import Declarations
    from sgconf.fieldinfo import FieldInfo

FILE_SUFFIXES = (".toml", ".json", ".yaml", ".yml")


@attrs.frozen(slots=True)
class LayerInput:
    """What one source layer contributed: raw values by field name, the detail of each, and its problems."""

    layer: str
    values: Mapping[str, Any] = attrs.field(factory=dict)
    details: Mapping[str, str] = attrs.field(factory=dict)
    problems: tuple[Problem, ...] = ()
    schema: Declarations = attrs.field(eq=False, repr=False, kw_only=True)

    def origin(self, name: str, value: Any) -> Origin:
        """The provenance entry of field `name` set by this layer to the converted `value`."""
        info = self.schema.field_info(name)
        return Origin(self.layer, self.details[name], value, secret=info.setting.secret)

    def sources(self) -> dict[str, str]:
        """`{field: "from env SGCONF_PAGE_SIZE"}` for every value of this layer."""
        return {name: Origin(self.layer, detail, None).describe() for name, detail in self.details.items()}


# -- environment ----------------------------------------------------------------------------


def read_env(env: Mapping[str, str], schema: Declarations) -> LayerInput:
    """Pick the `<PREFIX><FIELD>` variables out of `env`; unknown ones are problems with a suggestion."""
    infos = schema.fields()
    prefix, reserved = schema.env_prefix, schema.reserved_env
    by_var = {info.env_var: name for name, info in infos.items()}
    values: dict[str, Any] = {}
    details: dict[str, str] = {}
    problems: list[Problem] = []
    for var in sorted(env):
        if not var.startswith(prefix) or var in reserved:
            continue
        name = by_var.get(var)
        if name is None:
            hint = did_you_mean(var, [*by_var, *sorted(reserved)], normalize=False)
            path = f"$.{var[len(prefix) :].lower()}"
            problems.append(Problem(path, f"unknown environment variable '{var}'{hint}", f"from env {var}"))
            continue
        values[name] = env[var]
        details[name] = var
    return LayerInput("env", values, details, tuple(problems), schema=schema)


def config_path_from_env(env: Mapping[str, str], schema: Declarations) -> str | None:
    """The config file named by the schema's config variable (`SGCONF_CONFIG`), or None when unset or empty."""
    return env.get(schema.config_env) or None


# -- CLI --------------------------------------------------------------------------------------


def cli_layer(given: Mapping[str, Any], schema: Declarations, *, typed: Mapping[str, str] | None = None) -> LayerInput:
    """The CLI layer from the field flags actually given (`{field: raw value}`).

    `typed` names the spelling a value came in (`{"tp_size": "--tp"}`, an alias), so
    provenance says what the user typed. An undeclared name is kept, so conversion
    reports it with a suggestion instead of dropping a caller's typo silently.
    """
    infos = schema.fields()
    spelled = typed or {}
    details = {
        name: spelled.get(name)
        or _flag_given(infos[name].flag if name in infos else "--" + name.replace("_", "-"), value)
        for name, value in given.items()
    }
    return LayerInput("cli", dict(given), details, (), schema=schema)


def _flag_given(flag: str, value: Any) -> str:
    # a boolean switched off was typed as --no-<flag>; name it as typed
    return f"--no-{flag[2:]}" if value is False else flag


# -- config files -----------------------------------------------------------------------------


def read_config_file(path: str | os.PathLike[str], schema: Declarations) -> LayerInput:
    """Read a TOML, JSON or YAML config file, nested by namespace and/or flat by field name.

    Never raises for bad input: a missing file, a parse error (with its position),
    unknown keys (with a suggestion) and keys under the wrong namespace come back as
    problems naming the file.
    """
    file = config_file_path(path)
    where = f"from {file}"
    data, problem = _parse(file, schema)
    if problem is not None:
        return LayerInput("file", problems=(Problem("$", problem, where),), schema=schema)
    if not isinstance(data, Mapping):
        kind = type(data).__name__
        msg = f"a config file must hold a table of settings, got {kind}"
        return LayerInput("file", problems=(Problem("$", msg, where),), schema=schema)
    walker = _FileWalker(str(file), schema)
    walker.top(data)
    return LayerInput("file", walker.values, walker.details, tuple(walker.problems), schema=schema)


def config_file_path(path: str | os.PathLike[str]) -> Path:
    """The absolute, normalised path a config file is reported under (`~` expanded, `..` folded)."""
    return Path(os.path.abspath(os.path.expanduser(os.fspath(path))))


def _parse(file: Path, schema: Declarations) -> tuple[Any, str | None]:
    suffix = file.suffix.lower()
    if suffix not in FILE_SUFFIXES:
        return None, f"unsupported config file type '{suffix or file.name}' -- use .toml, .json or .yaml"
    if suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            return None, "reading YAML needs PyYAML, which is not installed -- pip install pyyaml, or use TOML or JSON"
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, f"config file not found -- check the --config path or {schema.config_env}"
    except IsADirectoryError:
        return None, "config path is a directory -- pass a .toml, .json or .yaml file"
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"cannot read config file: {exc}"
    if suffix == ".toml":
        try:
            return tomllib.loads(text), None
        except tomllib.TOMLDecodeError as exc:
            return None, f"invalid TOML: {exc}"
    if suffix == ".json":
        try:
            return json.loads(text, object_pairs_hook=_unique_pairs), None
        except _DuplicateKey as exc:
            return None, f"invalid JSON: {exc} -- each key may appear once in an object, as TOML requires too"
        except json.JSONDecodeError as exc:
            return None, f"invalid JSON: {exc.msg} (at line {exc.lineno}, column {exc.colno})"
    try:
        return yaml.load(text, Loader=_unique_yaml_loader(yaml)) or {}, None  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (at line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        fix = " -- each key may appear once in a mapping" if isinstance(exc, _DuplicateKey) else ""
        return None, f"invalid YAML: {reason}{at}{fix}"


class _DuplicateKey(SgconfError, ValueError):
    """Raised while parsing a JSON object (or, as the YAML loader's `DuplicateKey`, a mapping) that repeats a key."""


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(f"duplicate key {key!r}")
        out[key] = value
    return out


_YAML_LOADER: Any = None


def _unique_yaml_loader(yaml: Any) -> Any:
    """A SafeLoader that refuses a mapping repeating a key (PyYAML keeps the last one silently)."""
    global _YAML_LOADER
    if _YAML_LOADER is not None:
        return _YAML_LOADER

    class DuplicateKey(yaml.constructor.ConstructorError, _DuplicateKey):  # type: ignore[misc]
        """A YAML error (where PyYAML reports it, with its line) that says which kind it is by its class."""

    class UniqueKeyLoader(yaml.SafeLoader):  # type: ignore[name-defined,misc]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    fresh = key not in seen
                except TypeError:  # an unhashable key: the base class reports it
                    break
                if not fresh:
                    raise DuplicateKey(None, None, f"duplicate key {key!r}", key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    _YAML_LOADER = UniqueKeyLoader
    return UniqueKeyLoader


class _FileWalker:
    """Collects field values from a (possibly nested) mapping, checking each key's namespace."""

    def __init__(self, file: str, schema: Declarations) -> None:
        self.file = file
        self.schema = schema
        self.where = f"from {file}"
        self.infos = schema.fields()
        self.values: dict[str, Any] = {}
        self.details: dict[str, str] = {}
        self.problems: list[Problem] = []
        self.given_at: dict[str, str] = {}

    def top(self, data: Mapping[str, Any]) -> None:
        tops = self.schema.top_level_namespaces()
        for key, value in data.items():
            key = str(key)
            if key in tops and isinstance(value, Mapping):
                self.namespace(key, value)
            elif key in self.infos:
                self.field(key, value, f"$.{key}", None)
            elif key in tops:
                kind = type(value).__name__
                self.problem(f"$.{key}", f"'{key}' is a namespace and takes a table of settings, got {kind}")
            else:
                hint = did_you_mean(key, [*self.infos, *tops])
                self.problem(f"$.{key}", f"unknown key '{key}'{hint}")

    def namespace(self, path: str, data: Mapping[str, Any]) -> None:
        children = self.schema.group_children(path)
        for key, value in data.items():
            key = str(key)
            here = f"$.{path}.{key}"
            if key in children and isinstance(value, Mapping):
                self.namespace(children[key], value)
            elif key in children:
                kind = type(value).__name__
                self.problem(here, f"'{key}' is a namespace and takes a table of settings, got {kind}")
            elif key in self.infos:
                self.field(key, value, here, path)
            else:
                local = [*children, *(i.name for i in self.schema.iter_fields_of(path))]
                hint = did_you_mean(key, local) or did_you_mean(key, self.infos)
                self.problem(here, f"unknown key '{key}' in [{path}]{hint}")

    def field(self, name: str, value: Any, here: str, under: str | None) -> None:
        info = self.infos[name]
        if under is not None and info.namespace != under:
            msg = f"'{name}' belongs in [{info.namespace}], not [{under}] -- move it there or write it flat"
            self.problem(here, msg)
            return
        if name in self.given_at:
            self.problems.append(given_twice(info, self.given_at[name], self.where))
            return
        self.given_at[name] = here
        self.values[name] = value
        self.details[name] = self.file

    def problem(self, path: str, message: str) -> None:
        self.problems.append(Problem(path, message, self.where))


def given_twice(info: FieldInfo, first: str, where: str) -> Problem:
    """The problem of a field one source sets twice: `first` says where it was set before, `where` the second time.

    A config file that spells a field both nested and flat and a secrets directory with
    both `token` and `MYRT_TOKEN` are refused alike: which one wins would be a guess.
    """
    return given_twice_at(info.path, info.name, first, where)


def given_twice_at(path: str, name: str, first: str, where: str | None = None) -> Problem:
    """The problem of one value given twice: at `path` under the spelling `name`, and before at `first`.

    The one wording of the rule, for a config field (`given_twice`) and for a request
    parameter sent under two spellings or at two places (`engine.request_params`).
    """
    return Problem(path, f"'{name}' is given twice (also as {first}) -- keep one", where)


def layer_sources(layers: Iterable[LayerInput]) -> dict[str, str]:
    """The winning source text of every field set by `layers` (later layers win)."""
    out: dict[str, str] = {}
    for layer in layers:
        out.update(layer.sources())
    return out


# -- sources: one interface, a schema's ordered list ------------------------------------------


@attrs.frozen(slots=True)
class SourceRequest:
    """What a source may read for one load: the schema, the environment, the config file and the CLI values."""

    schema: Declarations
    env: Mapping[str, str]
    config_file: str | os.PathLike[str] | None
    cli: Mapping[str, Any]
    typed: Mapping[str, str] | None = None


class Source(Protocol):
    """A layer of raw values: `read` returns what it found (or its problems); it never raises for bad input.

    `name` is the layer its values are attributed to in provenance (`from <name>:<detail>`
    for a source of a runtime's own).
    """

    @property
    def name(self) -> str: ...

    def read(self, request: SourceRequest) -> LayerInput: ...


@attrs.frozen(slots=True)
class ConfigFileSource:
    """The config file named by `--config`, the `config_file` argument, or the schema's config variable."""

    name: str = "file"

    def read(self, request: SourceRequest) -> LayerInput:
        path = request.config_file
        if path is None:
            path = config_path_from_env(request.env, request.schema)
        if path is None or str(path) == "":
            return LayerInput(self.name, schema=request.schema)
        return read_config_file(path, request.schema)


@attrs.frozen(slots=True)
class EnvSource:
    """`<PREFIX><FIELD>` environment variables."""

    name: str = "env"

    def read(self, request: SourceRequest) -> LayerInput:
        return read_env(request.env, request.schema)


@attrs.frozen(slots=True)
class CliSource:
    """The field flags actually given on the command line."""

    name: str = "cli"

    def read(self, request: SourceRequest) -> LayerInput:
        return cli_layer(request.cli, request.schema, typed=request.typed)


@attrs.frozen(slots=True)
class SecretsDirSource:
    """One file per field in a directory (Docker and Kubernetes secrets): the file `<dir>/<field>` holds the value.

    The file name is the field name (or its env var name, `MYRT_API_KEY`); one trailing
    newline is dropped. Files that name no field are left alone: a secrets directory is
    shared with other programs; two files that name the same field are a problem naming
    both. A directory that does not exist contributes nothing unless `required`, when it
    is a problem naming it; one that cannot be read is always a problem, never an
    exception. `env_var` names a variable that, when set, gives the directory instead
    (`Schema.add_source` reserves it).
    """

    directory: str | os.PathLike[str]
    name: str = "secrets"
    required: bool = False
    env_var: str | None = None

    def read(self, request: SourceRequest) -> LayerInput:
        schema = request.schema
        chosen = request.env.get(self.env_var) if self.env_var else None
        root = Path(os.path.expanduser(chosen or os.fspath(self.directory)))
        try:
            entries = sorted(root.iterdir(), key=lambda p: p.name)
        except FileNotFoundError:
            if not self.required:
                return LayerInput(self.name, schema=schema)
            return self._refused(root, "does not exist -- create it or drop the source", schema)
        except NotADirectoryError:
            return self._refused(root, f"is not a directory -- {self._fix()}", schema)
        except OSError as exc:
            return self._refused(root, f"cannot be read ({exc.strerror or exc}) -- {self._fix()}", schema)
        by_file = {}
        for name, info in schema.fields().items():
            by_file[name] = name
            by_file[info.env_var] = name
        values: dict[str, Any] = {}
        details: dict[str, str] = {}
        problems: list[Problem] = []
        for entry in entries:
            field = by_file.get(entry.name)
            if field is None:
                continue
            info = schema.field_info(field)
            where = f"from {self.name}:{entry}"
            try:
                if not entry.is_file():
                    continue
                text = entry.read_text(encoding="utf-8")
            except UnicodeDecodeError:  # its message would quote a byte of the secret
                problems.append(Problem(info.path, f"cannot read {entry}: not UTF-8 text", where))
                continue
            except OSError as exc:
                problems.append(Problem(info.path, f"cannot read {entry}: {exc.strerror or exc}", where))
                continue
            if field in details:
                problems.append(given_twice(info, details[field], where))
                continue
            values[field] = text[:-1] if text.endswith("\n") else text
            details[field] = str(entry)
        return LayerInput(self.name, values, details, tuple(problems), schema=schema)

    def _fix(self) -> str:
        where = f"point {self.env_var} at one" if self.env_var else "give the source one"
        return f"{where}, readable by this process, or drop the source"

    def _refused(self, root: Path, why: str, schema: Declarations) -> LayerInput:
        problem = Problem("$", f"secrets directory {str(root)!r} {why}", f"from {self.name}:{root}")
        return LayerInput(self.name, problems=(problem,), schema=schema)


def default_sources() -> list[Source]:
    """The layers every schema starts with, lowest precedence first: the config file, the environment, the CLI."""
    return [ConfigFileSource(), EnvSource(), CliSource()]
