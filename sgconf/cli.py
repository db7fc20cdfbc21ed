"""The `sgconf` command: `show`, `schema`, and the commands other installed packages register.

Bad input never shows a traceback: `run_cli` prints the ConfigError text to stderr
and returns exit status 2. Commands such as `plan` and `serve` live in packages that
depend on torch and FastAPI, and sgconf names none of them: a package declares
`[project.entry-points."sgconf.commands"] plan = "pkg.module:main"` (a `main(argv) -> int`
whose docstring's first line is its help text), and the command is imported only
when asked for. `sgconf --version` prints the installed version; `python -m sgconf`
is the same command. `Schema.main()` gives another runtime the same `show`/`schema` commands
for its own declarations, under its own program name.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any

from sgconf.dump import nested, plain, redacted, to_toml
from sgconf.errors import ConfigError, DeclarationError
from sgconf.flags import ConfigArgumentParser, given_fields, typed_flags
from sgconf.flags import config_parser as config_parser
from sgconf.json_schema import config_schema
from sgconf.loading import Loaded, explain, load_layers
from sgconf.plugins import Registry
from sgconf.record import record_to_dict
from sgconf.resolution import resolve_once

if TYPE_CHECKING:
    from sgconf.declarations import Declarations

PROG = "sgconf"
COMMAND_GROUP = "sgconf.commands"


Command = Callable[[list[str]], "int | None"]
"""A command: `main(argv)` of the arguments after its name, returning the exit status (None: 0)."""

BUILTIN = "sgconf (built-in)"


def commands(group: str | None = COMMAND_GROUP) -> Registry[Command]:
    """The commands installed packages register in entry-point group `group` (None: none), by name.

    A `Registry`, so a name two packages declare is refused naming both, and `main` adds
    the built-in `show` and `schema` to it, so a package's `show` is refused the same way.
    """
    return Registry("command", entry_points=group)


def load_from_args(
    ns: argparse.Namespace,
    env: Mapping[str, str] | None = None,
    *,
    config_file: str | None = None,
    schema: Declarations,
) -> Loaded:
    """Build the record from a namespace parsed by a `config_parser()` parser.

    Only the field flags actually given count as the CLI layer; `--config` (or
    `config_file`, or the schema's config variable) names the file layer. Raises ConfigError.
    """
    path = getattr(ns, "config", None) or config_file
    return load_layers(given_fields(ns, schema), env=env, config_file=path, schema=schema, typed=typed_flags(ns))


def run_cli(fn: Callable[[], int], *, prog: str = PROG) -> int:
    """Run `fn`; a ConfigError (bad flags, env, file or values) is printed to stderr and gives 2, no traceback."""
    try:
        return fn()
    except ConfigError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help and --version end through argparse's exit()
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`sgconf show | head`): not an error of ours, and no traceback
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def main(argv: Sequence[str] | None = None, *, schema: Declarations, command_group: str | None = None) -> int:
    """The `show`/`schema` command line of `schema`, plus the commands registered in `command_group`; the exit status.

    `command_group` names an entry-point group (`sgconf.commands` for the `sgconf`
    console script) whose commands are built on this schema; None offers none.
    """
    prog = schema.name
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["--version"], ["-V"]):
        print(f"{prog} {version(schema)}")
        return 0
    registry = commands(command_group)
    try:
        registry.register("show", lambda rest: _show(rest, schema), registrant=BUILTIN)
        registry.register("schema", lambda rest: _schema(rest, schema), registrant=BUILTIN)
        return _dispatch(prog, args, registry)
    except DeclarationError as exc:  # two packages, or a package and sgconf, declare one command name
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except ConfigError as exc:  # a package declaring a built-in's name cannot be imported to compare it
        print(f"{prog}: {exc.problems[0].message}", file=sys.stderr)
        return 2


def _dispatch(prog: str, args: list[str], registry: Registry[Command]) -> int:
    if not args or args[0] in ("-h", "--help"):
        stream = sys.stdout if args else sys.stderr
        print(_usage(prog, registry), file=stream)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command not in registry:
        from sgconf.suggest import did_you_mean

        hint = did_you_mean(command, registry.names(), normalize=False)
        print(f"{prog}: unknown command '{command}'{hint} -- see '{prog} --help'", file=sys.stderr)
        return 2
    try:
        entry = registry.get(command)
    except ConfigError as exc:  # the package behind it cannot be imported: one line, no traceback
        print(f"{prog}: {exc.problems[0].message}", file=sys.stderr)
        return 2
    return run_cli(lambda: int(entry(rest) or 0), prog=prog)


def version(schema: Declarations) -> str:
    """The installed version of the distribution whose package declares `schema`.

    A runtime run from a source tree that is not installed has no version to report: "unknown".
    """
    distribution = _distribution_of(schema)
    try:
        return metadata.version(distribution) if distribution else "unknown"
    except metadata.PackageNotFoundError:
        return "unknown"


def _distribution_of(schema: Declarations) -> str | None:
    module = next(iter(schema.namespaces().values())).__module__.partition(".")[0]
    names = metadata.packages_distributions().get(module)
    return names[0] if names else None


def _usage(prog: str, registry: Registry[Command]) -> str:
    lines = [
        f"usage: {prog} COMMAND [options]",
        f"       {prog} --version",
        "",
        "commands:",
        "  show     print the resolved configuration (--format table|json|toml, --explain FIELD, --diff)",
        "  schema   print the JSON Schema (draft 2020-12) of every setting",
    ]
    lines.extend(f"  {name:<8} {_summary(registry, name)}" for name in registry.names() if name not in _OWN)
    lines += ["", f"'{prog} COMMAND --help' lists the options of a command, grouped by namespace."]
    return "\n".join(lines)


_OWN = ("show", "schema")


def _summary(registry: Registry[Command], name: str) -> str:
    """The help line of a registered command: its docstring's first clause (loading it, so only for --help)."""
    try:
        entry = registry.get(name)
    except ConfigError as exc:  # a command whose package is broken or missing must not break --help
        return f"unavailable ({exc.problems[0].message})"
    doc = (getattr(entry, "__doc__", None) or "").strip().splitlines()
    first = doc[0].split(";")[0].rstrip(".") if doc else f"from {registry.registrant(name)}"
    return first[:1].lower() + first[1:]


# -- show ---------------------------------------------------------------------------------------


def show_parser(schema: Declarations) -> argparse.ArgumentParser:
    description = "Print the resolved configuration, grouped by namespace, secrets redacted."
    parser = config_parser(f"{schema.name} show", description, schema=schema)
    out = parser.add_argument_group("output")
    out.add_argument(
        "--format", choices=("table", "json", "toml"), default="table", help="output format (default: table)"
    )
    out.add_argument(
        "--explain", metavar="FIELD", help="print where FIELD's value came from, layer by layer, winner last"
    )
    out.add_argument(
        "--diff", action="store_true", help="only the fields whose resolved value differs from the defaults"
    )
    return parser


def _show(argv: Sequence[str], schema: Declarations) -> int:
    ns = show_parser(schema).parse_args(argv)
    if ns.explain is not None:
        schema.field_info(ns.explain)  # an unknown name fails before any loading work, with a suggestion
    loaded = load_from_args(ns, schema=schema)
    # the model is read as `plan` and `serve` read it: one they would refuse is refused here too
    resolved = resolve_once(loaded.record, require_model=True)
    if ns.explain is not None:
        chain = explain(loaded.record, ns.explain, resolved, provenance=loaded.provenance)
        text = (
            _explain_text(ns.explain, chain, schema)
            if ns.format != "json"
            else _explain_json(ns.explain, chain, schema)
        )
        print(text)
        return 0
    values = record_to_dict(resolved.values)
    only = None
    if ns.diff:
        base = record_to_dict(resolve_once(schema.record()).values)
        only = [name for name in values if values[name] != base[name]]
    if ns.format == "json":
        print(json.dumps(nested(values, only=only, schema=schema), indent=2))
    elif ns.format == "toml":
        header = f"{schema.name} resolved configuration" + (" (differences from defaults)" if ns.diff else "")
        if loaded.config_file:
            header += f"\nconfig file: {loaded.config_file}"
        print(to_toml(nested(values, only=only, schema=schema), header=header, schema=schema), end="")
    else:

        def source_of(name: str) -> str:
            return explain(loaded.record, name, resolved, provenance=loaded.provenance)[-1].describe()

        print(_table(values, only, source_of, schema))
    return 0


def _table(
    values: Mapping[str, Any], only: list[str] | None, source_of: Callable[[str], str], schema: Declarations
) -> str:
    keep = None if only is None else set(only)
    width = max(len(n) for n in schema.fields())
    lines: list[str] = []
    for path in schema.leaf_namespaces():
        rows = [info for info in schema.iter_fields_of(path) if keep is None or info.name in keep]
        if not rows:
            continue
        lines.append(f"[{path}]")
        for info in rows:
            shown = json.dumps(plain(redacted(info.name, values[info.name], schema)))
            lines.append(f"  {info.name:<{width}}  {shown:<24}  {info.setting.apply:<7}  {source_of(info.name)}")
        lines.append("")
    if not lines:
        return "(no differences from the defaults)"
    return "\n".join(lines).rstrip("\n")


def _explain_text(name: str, chain: Sequence[Any], schema: Declarations) -> str:
    info = schema.field_info(name)
    names = [*info.setting.aliases, *(f"{flag} (inverse)" for flag in info.setting.inverse_aliases)]
    aliases = f" (aliases {', '.join(names)})" if names else ""
    # a help text's "default 1" is what resolution picks for a declared null: say so, so the
    # header agrees with the chain's first line
    decided = (
        " (declared null: resolution picks it when no layer sets it)"
        if info.default is None and "default" in info.setting.help
        else ""
    )
    lines = [f"{name} ({info.path}, {info.flag}{aliases}, env {info.env_var}): {info.setting.help}{decided}"]
    for i, origin in enumerate(chain):
        mark = "  <- winner" if i == len(chain) - 1 else ""
        value = json.dumps(plain(origin.shown_value()), default=str)
        lines.append(f"  {i + 1}. {origin.layer:<10} {value:<24} {origin.describe()}{mark}")
    return "\n".join(lines)


def _explain_json(name: str, chain: Sequence[Any], schema: Declarations) -> str:
    items = [
        {"layer": o.layer, "detail": o.detail, "value": plain(o.shown_value()), "source": o.describe()} for o in chain
    ]
    info = schema.field_info(name)
    head = {"field": name, "path": info.path, "flags": list(info.flags), "env": info.env_var}
    return json.dumps({**head, "chain": items}, indent=2, default=str)


# -- schema -------------------------------------------------------------------------------------


def _schema(argv: Sequence[str], schema: Declarations) -> int:
    parser = ConfigArgumentParser(prog=f"{schema.name} schema", description="Print the JSON Schema of every setting.")
    parser.add_argument("--indent", type=int, default=2, help="JSON indentation (default: 2)")
    ns = parser.parse_args(argv)
    print(json.dumps(config_schema(schema), indent=ns.indent))
    return 0
