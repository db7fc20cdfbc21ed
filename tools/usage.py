"""The argument parser both `tools` commands use: a usage error ends in a pointer to `--help`, exit 2.

argparse's own message names only the subcommand's prog; ours names the tool and the
command that prints its help, so a mistyped flag says where to look.
"""

from __future__ import annotations

import argparse
import sys
from typing import ClassVar


class UsageParser(argparse.ArgumentParser):
    """Subclass it with the `tool` name and `help_command`; subparsers take the subclass as `parser_class`."""

    tool: ClassVar[str]
    help_command: ClassVar[str]

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"{self.tool}: error: {message} -- see {self.help_command} --help", file=sys.stderr)
        raise SystemExit(2)
