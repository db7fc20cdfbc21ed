"""`Schema`: one runtime's namespace declarations and everything derived from them.

How a schema is declared and frozen, and what freezing derives, is told in
`sgconf.declarations`, which holds the declaring half; this class adds what uses it:
loading, building records, the JSON Schema, the CLI parser and `main`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sgconf.bag_class import PATH_ATTR
from sgconf.cli import main
from sgconf.declarations import TEST_ROLE, Declarations
from sgconf.errors import BadArgument, DeclarationError
from sgconf.flags import config_parser
from sgconf.json_schema import config_schema
from sgconf.loading import attach_provenance, load
from sgconf.provenance import BUILT_IN_LAYERS, Origin
from sgconf.record_class import SCHEMA_ATTR, schema_of
from sgconf.sources import Source, default_sources
from sgconf.validation import build_record


class Schema(Declarations):
    """A runtime's declarations plus loading, validation, its JSON Schema and its CLI; see the module docstring.

    `name` is the program name (CLI prog, JSON Schema title, messages); `env_prefix`
    defaults to `NAME_` and `config_env` to `<prefix>CONFIG`. `record_name` names the flat
    record class (`ServerArgs` by default, so the read ratchet finds it).
    """

    # -- sources -----------------------------------------------------------------------

    # what loading reads, lowest precedence first; shared until `add_source` gives a schema its own
    sources: tuple[Source, ...] = tuple(default_sources())

    def add_source(self, source: Source, *, before: str | None = None, after: str | None = None) -> None:
        """Add a config source (a `sgconf.sources.Source`) between the others, by their layer names.

        Sources are read lowest precedence first, in the order `schema.sources` lists them:
        `file`, `env`, `cli` by default, and a value from a later source wins. `before="env"`
        puts a secrets directory above the config file and below the environment; with
        neither, the source goes last (above the CLI). Raises DeclarationError for an
        unknown anchor, a name another source or a built-in layer of provenance has
        (`default`, `override`, `record`, ...: its values would read as theirs), or a frozen schema.
        """
        name = getattr(source, "name", None)
        self._declaring(f"source {name!r}")
        current = list(self.sources)
        names = [s.name for s in current]
        if not isinstance(name, str) or not name:
            raise DeclarationError(f"a source of schema {self.name!r} needs a non-empty name, got {name!r}")
        if name in names:
            raise DeclarationError(
                f"schema {self.name!r} already reads a source named {name!r} -- give this one another name"
            )
        if name in BUILT_IN_LAYERS:
            raise DeclarationError(
                f"source name {name!r} is a built-in layer of provenance ({', '.join(sorted(BUILT_IN_LAYERS))}),"
                f" so its values would read as that layer's -- give this source of schema {self.name!r} another name"
            )
        if before is not None and after is not None:
            raise DeclarationError("add_source() takes before= or after=, not both")
        anchor = before if before is not None else after
        if anchor is not None and anchor not in names:
            raise DeclarationError(f"no source {anchor!r} in schema {self.name!r} -- sources are: {', '.join(names)}")
        at = len(current) if anchor is None else names.index(anchor) + (0 if before is not None else 1)
        self.sources = (*current[:at], source, *current[at:])
        switch = getattr(source, "env_var", None)
        if switch:  # the variable that points the source somewhere is not a field, nor a typo
            self.reserved_env.add(switch)

    # -- using it ----------------------------------------------------------------------

    def load(
        self, argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None, config_file: Any = None
    ) -> Any:
        """`sgconf.load` with this schema's fields, prefix and config variable; returns a Loaded."""
        return load(argv, env, config_file, schema=self)

    def build(self, values: Mapping[str, Any] | None = None, /, **fields: Any) -> Any:
        """A validated record from field values (strings are converted like env/CLI values); raises ConfigError."""
        raw = {**(values or {}), **fields}
        return build_record(raw, dict.fromkeys(raw, f"from {self.name} build()"), schema=self)

    def json_schema(self) -> dict[str, Any]:
        """The JSON Schema (draft 2020-12) of this schema's settings, nested by namespace."""
        return config_schema(self)

    def parser(self, prog: str | None = None, description: str = "") -> Any:
        """An argparse parser with `--config` and one flag per field; parse errors raise UsageError."""
        return config_parser(prog or self.name, description, schema=self)

    def main(self, argv: Sequence[str] | None = None, *, command_group: str | None = None) -> int:
        """A `show`/`schema` command line for this schema (a runtime's `python -m` entry); returns the exit status.

        `command_group` names an entry-point group of more commands built on this schema.
        """
        return main(argv, schema=self, command_group=command_group)

    def as_record(self, obj: Any) -> Any:
        """`obj` as this schema's record: a record passes through; an instance of the adopted dataclass is converted.

        Raises TypeError for anything else, ConfigError when an adopted instance holds a bad value.
        """
        record = self.record
        if isinstance(obj, record):
            return obj
        if self._adopted is not None and isinstance(obj, self._adopted):
            raw = {name: getattr(obj, name) for name in self._fields}
            detail = f"{type(obj).__name__} instance"
            given = {n: v for n, v in raw.items() if v != self._fields[n].default}
            built = build_record(given, dict.fromkeys(given, f"from {detail}"), schema=self)
            # provenance: the dataclass's defaults, then what the adopter's own loading set
            infos = self._fields
            origins = [(n, Origin("record", detail, getattr(built, n), secret=infos[n].setting.secret)) for n in given]
            attach_provenance(built, self, origins)
            return built
        raise BadArgument(f"expected a {self.record_name} record of schema {self.name!r}, got {type(obj).__name__}")


__all__ = ["PATH_ATTR", "SCHEMA_ATTR", "TEST_ROLE", "Schema", "schema_of"]
