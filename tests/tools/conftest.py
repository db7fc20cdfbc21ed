"""A throwaway repository with a ratchet.toml, and a runner for the CLI inside it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tools.ratchet.cli import main

CONFIG = """\
[config]
field_source = "sgconf:SERVING"
include = ["pkg/**"]
exclude = ["pkg/tests/**"]
"""


class Repo:
    def __init__(self, root: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.root = root
        self.capsys = capsys

    def write(self, rel: str, text: str) -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return path

    def config(self, extra: str = "") -> None:
        self.write("ratchet.toml", CONFIG + textwrap.dedent(extra))

    def read(self, rel: str) -> str:
        return (self.root / rel).read_text(encoding="utf-8")

    def run(self, *args: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        code = main(list(args))
        out, err = self.capsys.readouterr()
        return code, out, err


@pytest.fixture
def repo(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Repo:
    monkeypatch.chdir(tmp_path)
    r = Repo(tmp_path, capsys)
    r.config()
    return r
