"""Command-line flags generated from the field declarations, grouped by namespace.

Flags carry raw strings: conversion and checks happen in `sgconf.validation`, like for
every other layer, so `--page-size 12` fails with the same message as
`SGCONF_PAGE_SIZE=12` (the prefix is the schema's). Field flags default to "not given" (argparse's SUPPRESS), which
is how loading tells a flag the user typed from a default.

Help reads like the usual serving runtimes' (vLLM's `--help=<group>`): a command's own
options come first, then the declared settings grouped by namespace; `--help=memory`
shows one namespace, `--help=tp` every setting whose flag or alias mentions `tp`.
A field's aliases print next to its flag (`--tp-size, --tp INT`), and a default prints
once, as the field's help text or the command states it.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from sgconf.convert import _strip_optional
from sgconf.durations import FORMAT
from sgconf.errors import Problem, UsageError
from sgconf.fieldinfo import FieldInfo
from sgconf.frozen import thaw
from sgconf.kinds import ClassKind, class_kind
from sgconf.suggest import did_you_mean

if TYPE_CHECKING:
    from sgconf.declarations import Declarations

CLI_SOURCE = "from command line"


class FieldHelpFormatter(argparse.HelpFormatter):
    """Prints a flag and its aliases once, with one metavar: `--tp-size, --tp, --tensor-parallel-size INT`."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32)

    def _split_lines(self, text: str, width: int) -> list[str]:
        # never break a flag named in a help text (`--disable-radix-` / `cache`)
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings or action.nargs == 0 or isinstance(action, argparse.BooleanOptionalAction):
            return super()._format_action_invocation(action)
        metavar = self._format_args(action, self._get_default_metavar_for_optional(action))
        return f"{', '.join(action.option_strings)} {metavar}"


class _HelpAction(argparse.Action):
    """`-h`/`--help` with an optional topic: `--help`, `--help=memory`, `--help=tp`."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=dest, nargs="?", default=argparse.SUPPRESS, metavar="TOPIC", **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option_string: Any = None) -> None:
        text = parser.format_help(values) if isinstance(parser, ConfigArgumentParser) else parser.format_help()
        parser._print_message(text, sys.stdout)
        parser.exit()


class ConfigArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser that raises UsageError instead of exiting, and suggests flags for typos."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", FieldHelpFormatter)
        add_help = kwargs.pop("add_help", True)
        kwargs["add_help"] = False  # ours takes a topic
        super().__init__(*args, **kwargs)
        self.field_groups: dict[str, argparse._ArgumentGroup] = {}  # namespace path -> its group
        self.refused_flags: dict[str, str] = {}  # flag -> why this runtime does not take it
        if add_help:
            self.add_argument(
                "-h",
                "--help",
                action=_HelpAction,
                help="show this help and exit; --help=NAMESPACE shows one namespace, --help=WORD the settings matching WORD",
            )

    def format_help(self, topic: str | None = None) -> str:  # type: ignore[override]
        """The command's own options first, then the declared settings by namespace; `topic` narrows the latter."""
        fields = set(self.field_groups.values())
        own = [g for g in self._action_groups if g not in fields and (g._group_actions or g.description)]
        formatter = self._get_formatter()
        formatter.add_usage(self.usage, self._actions, self._mutually_exclusive_groups)
        formatter.add_text(self.description)
        sections: list[tuple[str | None, str | None, list[argparse.Action]]]
        sections = [(g.title, g.description, g._group_actions) for g in own] if topic is None else []
        sections += self._topic_sections(topic)
        for title, description, actions in sections:
            formatter.start_section(title)
            formatter.add_text(description)
            formatter.add_arguments(actions)
            formatter.end_section()
        formatter.add_text(self.epilog)
        return formatter.format_help()

    def _topic_sections(self, topic: str | None) -> list[tuple[str | None, str | None, list[argparse.Action]]]:
        groups = self.field_groups
        if topic is None or topic == "all":
            return [(groups[p].title, groups[p].description, groups[p]._group_actions) for p in groups]
        chosen = [path for path in groups if path == topic or path.startswith(topic + ".")]
        if chosen:
            return [(groups[p].title, groups[p].description, groups[p]._group_actions) for p in chosen]
        word = topic.lstrip("-").replace("_", "-").lower()
        matched = [
            a
            for g in groups.values()
            for a in g._group_actions
            if word and any(word in opt.lstrip("-") for opt in a.option_strings)
        ]
        if matched:
            return [(f"settings matching '{topic}'", None, matched)]
        hint = did_you_mean(topic, list(groups), normalize=False)
        msg = f"no help topic '{topic}'{hint} -- use a namespace ({', '.join(groups)}), all, or a word of a flag"
        raise UsageError([Problem("$", msg, CLI_SOURCE)], header="invalid command line")

    def error(self, message: str) -> NoReturn:
        raise UsageError(
            [Problem("$", f"{message} -- see '{self.prog} --help'", CLI_SOURCE)], header="invalid command line"
        )

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
                path = f"$.{flag.lstrip('-').replace('-', '_')}"
                reason = self.refused_flags.get(flag) or self.refused_flags.get(flag.replace("--no-", "--", 1))
                if reason is not None:
                    problems.append(Problem(path, f"'{flag}' is not supported here: {reason}", CLI_SOURCE))
                    continue
                guess = flag.replace("_", "-").lower()
                hint = did_you_mean(guess, known, normalize=False)
                problems.append(Problem(path, f"unknown flag '{flag}'{hint}", CLI_SOURCE))
            else:
                problems.append(Problem("$", f"unexpected argument '{arg}' -- see '{self.prog} --help'", CLI_SOURCE))
        return problems


def config_parser(
    prog: str,
    description: str = "",
    *,
    schema: Declarations,
    shown_defaults: Mapping[str, str] | None = None,
) -> argparse.ArgumentParser:
    """A parser with `--config FILE` and one flag per field of `schema`, by namespace.

    Subcommands add their own options to it; `--help` prints those first.
    `shown_defaults` states, per field, the default this command really applies when
    it differs from the declared one (`{"enable_hierarchical_cache": "true ..."}`).
    Parse errors raise UsageError (a ConfigError): `run_cli` prints them without a
    traceback and exits 2.
    """
    example = next(iter(schema.fields().values()))
    # the schema's sources in the order loading reads them, the built-in ones in the words users know
    order = " < ".join(["defaults", *(_SOURCE_WORDS.get(s.name, s.name) for s in schema.sources)])
    parser = ConfigArgumentParser(
        prog=prog,
        usage="%(prog)s [options]",  # ~70 settings: the full synopsis would bury the help
        description=description or None,
        allow_abbrev=False,
        epilog=(
            f"Every setting can also come from the config file or env {schema.env_prefix}<FIELD> "
            f"(e.g. {example.env_var}); precedence: {order}."
        ),
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=None,
        help=f"config file (.toml, .json, .yaml), nested by namespace or flat; default: env {schema.config_env}",
    )
    add_field_flags(parser, schema, shown_defaults=shown_defaults)
    return parser


_SOURCE_WORDS = {"file": "config file", "env": "env", "cli": "flags"}


def add_field_flags(
    parser: argparse.ArgumentParser, schema: Declarations, *, shown_defaults: Mapping[str, str] | None = None
) -> None:
    """Add one argument group per namespace and one flag (with its aliases) per field to `parser`."""
    shown = shown_defaults or {}
    if isinstance(parser, ConfigArgumentParser):
        parser.refused_flags.update(schema.refused_flags)
    for path in schema.leaf_namespaces():
        group = parser.add_argument_group(f"{path} settings")
        if isinstance(parser, ConfigArgumentParser):
            parser.field_groups[path] = group
        for info in schema.iter_fields_of(path):
            _add_flag(group, info, shown.get(info.name))


# where the parsed namespace keeps the spelling each field flag was given in (`--tp` for tp_size)
TYPED_ATTR = "_sgconf_typed_flags"


def _note_typed(namespace: Any, dest: str, option_string: str | None) -> None:
    if option_string is not None:
        typed = getattr(namespace, TYPED_ATTR, None)
        if typed is None:
            typed = {}
            setattr(namespace, TYPED_ATTR, typed)
        typed[dest] = option_string


class _FieldStore(argparse._StoreAction):
    """Stores a field's raw string and remembers which of its flags was typed."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option_string: Any = None) -> None:
        super().__call__(parser, namespace, values, option_string)
        _note_typed(namespace, self.dest, option_string)


class _FieldSwitch(argparse.BooleanOptionalAction):
    """`--flag` / `--no-flag` for a boolean field, remembering which was typed."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option_string: Any = None) -> None:
        super().__call__(parser, namespace, values, option_string)
        _note_typed(namespace, self.dest, option_string)


class _InverseSwitch(argparse.BooleanOptionalAction):
    """`--enable-x` / `--no-enable-x` declared as the opposite of a boolean field (`--disable-x`)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option_string: Any = None) -> None:
        on = option_string is not None and not option_string.startswith("--no-")
        setattr(namespace, self.dest, not on)
        _note_typed(namespace, self.dest, option_string)


def _add_flag(group: argparse._ArgumentGroup, info: FieldInfo, shown_default: str | None) -> None:
    text = help_text(info, shown_default)
    if _strip_optional(info.type) is bool:
        group.add_argument(*info.flags, dest=info.name, action=_FieldSwitch, default=argparse.SUPPRESS, help=text)
        if info.setting.inverse_aliases:
            group.add_argument(
                *info.setting.inverse_aliases,
                dest=info.name,
                action=_InverseSwitch,
                default=argparse.SUPPRESS,
                help=f"the opposite of {info.flag}: {info.setting.inverse_aliases[0]} is --no-{info.flag[2:]}",
            )
        return
    group.add_argument(
        *info.flags, dest=info.name, action=_FieldStore, metavar=_metavar(info), default=argparse.SUPPRESS, help=text
    )


def help_text(info: FieldInfo, shown_default: str | None = None) -> str:
    """A field's `--help` line: its help, its default said once, and its marks (secret, hot).

    A field that defaults to None and is decided later says what it becomes in its
    help text ("default 1", "default by device"); that text is the truth, so no
    "(default: none)" follows it. `shown_default` is what the command applies instead.
    """
    marks = [m for m, on in (("secret", info.setting.secret), ("hot", info.setting.hot)) if on]
    if info.setting.apply == "drain":  # hot fields apply between steps; these wait for an idle engine
        marks.append("applies after a drain")
    tail = f" [{', '.join(marks)}]" if marks else ""
    if class_kind(_strip_optional(info.type)) is ClassKind.DURATION:
        tail += f"; DURATION is {FORMAT}"
    if shown_default is not None:
        text = f"{info.setting.help} (default: {shown_default})"
    elif info.default is None and "default" in info.setting.help:
        text = info.setting.help
    else:
        text = f"{info.setting.help} (default: {_shown_default(info)})"
    return (text + tail).replace("%", "%%")  # argparse formats help with %-style


def _shown_default(info: FieldInfo) -> str:
    # a secret's declared default is redacted like any value of it; an enum shows its value, a duration its `1h30m`
    default = thaw(info.shown(info.default))
    if default is None:
        return "none"
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, (dict, list)):
        return json.dumps(default)
    return str(default)


def _metavar(info: FieldInfo) -> str:
    choices = info.choices
    if choices is not None:
        return "{" + ",".join(str(c) for c in choices) + "}"
    inner = _strip_optional(info.type)
    origin = getattr(inner, "__origin__", inner)
    kind = class_kind(origin)
    if kind is not None and kind is not ClassKind.ENUM:  # an Enum field has choices, shown above
        return _CLASS_METAVARS[kind]
    return _METAVARS.get(origin, "VALUE")


_METAVARS = {
    int: "INT",
    float: "FLOAT",
    str: "STR",
    dict: "JSON",
    list: "LIST",
    tuple: "LIST",
    set: "LIST",
    frozenset: "LIST",
}
# a record is written as a JSON object of its fields
_CLASS_METAVARS = {ClassKind.PATH: "PATH", ClassKind.DURATION: "DURATION", ClassKind.RECORD: "JSON"}


def given_fields(ns: argparse.Namespace, schema: Declarations) -> dict[str, Any]:
    """The field flags actually given on the command line: `{field: raw value}`."""
    given = vars(ns)
    return {name: given[name] for name in schema.field_names() if name in given}


def typed_flags(ns: argparse.Namespace) -> dict[str, str]:
    """The spelling each given field flag was typed in, `{field: "--tp"}`, for provenance."""
    return dict(getattr(ns, TYPED_ATTR, None) or {})
