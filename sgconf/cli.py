"""The `sgconf` command: `show`, `schema`, and the `plan` / `serve` commands of the runtime packages.

Bad input never shows a traceback: `run_cli` prints the ConfigError text to stderr
and returns exit status 2. `plan` and `serve` live in packages that depend on torch
and FastAPI, so they are imported only when asked for.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sgconf.dump import nested, plain, redacted, to_toml
from sgconf.errors import ConfigError
from sgconf.flags import ConfigArgumentParser, given_fields
from sgconf.flags import config_parser as config_parser
from sgconf.loading import Loaded, explain, load_layers
from sgconf.record import ServerArgs, record_to_dict
from sgconf.registry import field_info, fields, iter_fields_of, leaf_namespaces
from sgconf.resolution import resolve_once
from sgconf.schema import config_schema

PROG = "sgconf"

# Commands implemented elsewhere: name -> (module, what it does). Each module has `main(argv) -> int`.
DELEGATED = {
    "plan": ("mem_cache.plan_cli", "print the KV memory plan for a model and config"),
    "serve": ("engine.serve", "run the embedded runtime and its HTTP control plane"),
}


def load_from_args(
    ns: argparse.Namespace, env: Mapping[str, str] | None = None, *, config_file: str | None = None
) -> Loaded:
    """Build the record from a namespace parsed by a `config_parser()` parser.

    Only the field flags actually given count as the CLI layer; `--config` (or
    `config_file`, or env SGCONF_CONFIG) names the file layer. Raises ConfigError.
    """
    path = getattr(ns, "config", None) or config_file
    return load_layers(given_fields(ns), env=env, config_file=path)


def run_cli(fn: Callable[[], int]) -> int:
    """Run `fn`; a ConfigError (bad flags, env, file or values) is printed to stderr and gives 2, no traceback."""
    try:
        return fn()
    except ConfigError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help and --version end through argparse's exit()
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`sgconf show | head`): not an error of ours, and no traceback
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `sgconf` console script; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        stream = sys.stdout if args else sys.stderr
        print(_usage(), file=stream)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "show":
        return run_cli(lambda: _show(rest))
    if command == "schema":
        return run_cli(lambda: _schema(rest))
    if command in DELEGATED:
        return _delegate(command, rest)
    from sgconf.suggest import did_you_mean

    hint = did_you_mean(command, ["show", "schema", *DELEGATED], normalize=False)
    print(f"{PROG}: unknown command '{command}'{hint} -- see '{PROG} --help'", file=sys.stderr)
    return 2


def _usage() -> str:
    lines = [
        f"usage: {PROG} COMMAND [options]",
        "",
        "commands:",
        "  show     print the resolved configuration (--format table|json|toml, --explain FIELD, --diff)",
        "  schema   print the JSON Schema (draft 2020-12) of every setting",
    ]
    lines.extend(f"  {name:<8} {text}" for name, (_, text) in DELEGATED.items())
    lines += ["", f"'{PROG} COMMAND --help' lists the options of a command, grouped by namespace."]
    return "\n".join(lines)


def _delegate(command: str, rest: list[str]) -> int:
    module_name, _ = DELEGATED[command]
    try:
        module = importlib.import_module(module_name)
        entry = module.main
    except (ImportError, AttributeError) as exc:
        print(f"{PROG}: the '{command}' command is unavailable ({module_name}: {exc})", file=sys.stderr)
        return 2
    return run_cli(lambda: int(entry(rest) or 0))


# -- show ---------------------------------------------------------------------------------------


def show_parser() -> argparse.ArgumentParser:
    parser = config_parser(f"{PROG} show", "Print the resolved configuration, grouped by namespace, secrets redacted.")
    out = parser.add_argument_group("output")
    out.add_argument("--format", choices=("table", "json", "toml"), default="table", help="output format (default: table)")
    out.add_argument("--explain", metavar="FIELD", help="print where FIELD's value came from, layer by layer, winner last")
    out.add_argument("--diff", action="store_true", help="only the fields whose resolved value differs from the defaults")
    return parser


def _show(argv: Sequence[str]) -> int:
    ns = show_parser().parse_args(argv)
    if ns.explain is not None:
        field_info(ns.explain)  # an unknown name fails before any loading work, with a suggestion
    loaded = load_from_args(ns)
    resolved = resolve_once(loaded.record)
    if ns.explain is not None:
        chain = explain(loaded.record, ns.explain, resolved, provenance=loaded.provenance)
        print(_explain_text(ns.explain, chain) if ns.format != "json" else _explain_json(ns.explain, chain))
        return 0
    values = record_to_dict(resolved.values)
    only = None
    if ns.diff:
        base = record_to_dict(resolve_once(ServerArgs()).values)
        only = [name for name in values if values[name] != base[name]]
    if ns.format == "json":
        print(json.dumps(nested(values, only=only), indent=2))
    elif ns.format == "toml":
        header = "sgconf resolved configuration" + (" (differences from defaults)" if ns.diff else "")
        if loaded.config_file:
            header += f"\nconfig file: {loaded.config_file}"
        print(to_toml(nested(values, only=only), header=header), end="")
    else:
        print(_table(values, only, lambda name: explain(loaded.record, name, resolved, provenance=loaded.provenance)[-1].describe()))
    return 0


def _table(values: Mapping[str, Any], only: list[str] | None, source_of: Callable[[str], str]) -> str:
    keep = None if only is None else set(only)
    width = max(len(n) for n in fields())
    lines: list[str] = []
    for path in leaf_namespaces():
        rows = [info for info in iter_fields_of(path) if keep is None or info.name in keep]
        if not rows:
            continue
        lines.append(f"[{path}]")
        for info in rows:
            shown = json.dumps(plain(redacted(info.name, values[info.name])))
            lines.append(f"  {info.name:<{width}}  {shown:<24}  {info.spec.apply:<7}  {source_of(info.name)}")
        lines.append("")
    if not lines:
        return "(no differences from the defaults)"
    return "\n".join(lines).rstrip("\n")


def _explain_text(name: str, chain: Sequence[Any]) -> str:
    info = field_info(name)
    lines = [f"{name} ({info.path}, {info.flag}, env {info.env_var}): {info.spec.help}"]
    for i, origin in enumerate(chain):
        mark = "  <- winner" if i == len(chain) - 1 else ""
        value = json.dumps(plain(origin.shown_value()), default=str)
        lines.append(f"  {i + 1}. {origin.layer:<10} {value:<24} {origin.describe()}{mark}")
    return "\n".join(lines)


def _explain_json(name: str, chain: Sequence[Any]) -> str:
    items = [
        {"layer": o.layer, "detail": o.detail, "value": plain(o.shown_value()), "source": o.describe()} for o in chain
    ]
    return json.dumps({"field": name, "path": field_info(name).path, "chain": items}, indent=2, default=str)


# -- schema -------------------------------------------------------------------------------------


def _schema(argv: Sequence[str]) -> int:
    parser = ConfigArgumentParser(prog=f"{PROG} schema", description="Print the JSON Schema of every setting.")
    parser.add_argument("--indent", type=int, default=2, help="JSON indentation (default: 2)")
    ns = parser.parse_args(argv)
    print(json.dumps(config_schema(), indent=ns.indent))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
