"""Command-line flags generated from the field declarations, grouped by namespace.

Flags carry raw strings: conversion and checks happen in `sgconf.validation`, like for
every other layer, so `--page-size 12` fails with the same message as
`SGCONF_PAGE_SIZE=12` (the prefix is the schema's). Field flags default to "not given" (argparse's SUPPRESS), which
is how loading tells a flag the user typed from a default.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from sgconf.convert import _strip_optional
from sgconf.errors import Problem, UsageError
from sgconf.registry import FieldInfo, serving
from sgconf.suggest import did_you_mean

if TYPE_CHECKING:
    from sgconf.schema import Schema

CLI_SOURCE = "from command line"


class ConfigArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser that raises UsageError instead of exiting, and suggests flags for typos."""

    def error(self, message: str) -> NoReturn:
        raise UsageError([Problem("$", f"{message} -- see '{self.prog} --help'", CLI_SOURCE)], header="invalid command line")

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        ns, extra = self.parse_known_args(args, namespace)
        if extra:
            raise UsageError(self._unknown(extra), header="invalid command line")
        return ns

    def _unknown(self, extra: Sequence[str]) -> list[Problem]:
        known = [opt for action in self._actions for opt in action.option_strings if opt.startswith("--")]
        problems = []
        after_flag = False
        for arg in extra:
            if after_flag and not arg.startswith("-"):
                after_flag = False  # the value of the unknown flag before it, already reported
                continue
            after_flag = arg.startswith("-") and "=" not in arg
            if arg.startswith("-"):
                flag = arg.split("=", 1)[0]
                guess = flag.replace("_", "-").lower()
                hint = did_you_mean(guess, known, normalize=False)
                problems.append(Problem(f"$.{flag.lstrip('-').replace('-', '_')}", f"unknown flag '{flag}'{hint}", CLI_SOURCE))
            else:
                problems.append(Problem("$", f"unexpected argument '{arg}' -- see '{self.prog} --help'", CLI_SOURCE))
        return problems


def config_parser(prog: str, description: str = "", *, schema: Schema | None = None) -> argparse.ArgumentParser:
    """A parser with `--config FILE` and one flag per field of `schema` (the serving one by default), by namespace.

    Subcommands add their own options to it. Parse errors raise UsageError (a
    ConfigError): `run_cli` prints them without a traceback and exits 2.
    """
    schema = schema or serving()
    example = next(iter(schema.fields().values()))
    parser = ConfigArgumentParser(
        prog=prog,
        usage="%(prog)s [options]",  # ~70 settings: the full synopsis would bury the help
        description=description or None,
        allow_abbrev=False,
        epilog=(
            f"Every setting can also come from the config file or env {schema.env_prefix}<FIELD> "
            f"(e.g. {example.env_var}); precedence: defaults < config file < env < flags."
        ),
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=None,
        help=f"config file (.toml, .json, .yaml), nested by namespace or flat; default: env {schema.config_env}",
    )
    add_field_flags(parser, schema)
    return parser


def add_field_flags(parser: argparse.ArgumentParser, schema: Schema | None = None) -> None:
    """Add one argument group per namespace and one flag per field to `parser`."""
    schema = schema or serving()
    for path in schema.leaf_namespaces():
        group = parser.add_argument_group(f"{path} settings")
        for info in schema.iter_fields_of(path):
            _add_flag(group, info)


def _add_flag(group: argparse._ArgumentGroup, info: FieldInfo) -> None:
    text = _help(info)
    if _strip_optional(info.type) is bool:
        group.add_argument(
            info.flag, dest=info.name, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS, help=text
        )
        return
    group.add_argument(info.flag, dest=info.name, metavar=_metavar(info), default=argparse.SUPPRESS, help=text)


def _help(info: FieldInfo) -> str:
    marks = [m for m, on in (("secret", info.spec.secret), ("hot", info.spec.hot)) if on]
    if info.spec.apply == "drain":  # hot fields apply between steps; these wait for an idle engine
        marks.append("applies after a drain")
    tail = f" [{', '.join(marks)}]" if marks else ""
    text = f"{info.spec.help} (default: {_shown_default(info)}){tail}"
    return text.replace("%", "%%")  # argparse formats help with %-style


def _shown_default(info: FieldInfo) -> str:
    default = info.default
    if default is None:
        return "none"
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, (dict, list, tuple)):
        return json.dumps(default)
    return str(default)


def _metavar(info: FieldInfo) -> str:
    choices = info.choices
    if choices is not None:
        return "{" + ",".join(str(c) for c in choices) + "}"
    inner = _strip_optional(info.type)
    origin = getattr(inner, "__origin__", inner)
    return {int: "INT", float: "FLOAT", str: "STR", dict: "JSON", list: "LIST"}.get(origin, "VALUE")


def given_fields(ns: argparse.Namespace, schema: Schema | None = None) -> dict[str, Any]:
    """The field flags actually given on the command line: `{field: raw value}`."""
    given = vars(ns)
    return {name: given[name] for name in (schema or serving()).field_names() if name in given}
