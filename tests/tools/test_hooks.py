"""The published pre-commit hooks name real subcommands and run over the whole configured tree."""

from __future__ import annotations

from pathlib import Path

import yaml

from tools.ratchet.cli import build_parser

HOOKS = Path(__file__).resolve().parents[2] / ".pre-commit-hooks.yaml"


def test_hooks_run_real_commands_on_the_whole_tree():
    """Each hook's entry is `sgconf-ratchet <subcommand>` that the parser accepts, without filenames."""
    hooks = yaml.safe_load(HOOKS.read_text(encoding="utf-8"))
    assert [h["id"] for h in hooks] == ["sgconf-ratchet", "sgconf-ratchet-unread"]
    for hook in hooks:
        program, command = hook["entry"].split()
        assert program == "sgconf-ratchet"
        assert build_parser().parse_args([command]).command == command
        assert hook["pass_filenames"] is False and hook["language"] == "python"
