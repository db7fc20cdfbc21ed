"""Newer grammar than the interpreter's: the same sites as the C parser finds, and `fix` on such files."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from sgconf import SERVING
from tools.ratchet.lowering import lower
from tools.ratchet.rules import RULES
from tools.ratchet.scanner import collect, scan_module, scan_text
from tools.ratchet.settings import ScanSettings

pytestmark = pytest.mark.slow  # starts processes or servers: `make test-fast` leaves it out

PROJECT = Path(__file__).resolve().parents[2]
SETTINGS = ScanSettings(fields=frozenset(SERVING.field_names()))

ARGS = '''
from sgconf import ServerArgs


class PortArgs(ServerArgs):
    """A launcher's own record type, derived from the project's."""


type ArgsLike = ServerArgs
'''

MANAGER = """
from pkg.args import ArgsLike, PortArgs
from runtime import get_server_args


class Queue[T]:
    def __init__(self, items: list[T]) -> None:
        self.items = items


def first[T: (int, str)](items: list[T]) -> T:
    return items[0]


class TokenizerManager:
    def __init__(self, server_args: PortArgs, port_args: ArgsLike) -> None:
        self.server_args = server_args
        self.tp = port_args.tp_size

    def describe(self) -> str:
        return f"{self.server_args.model_path!r} on {self.server_args.host}:{self.server_args.port}"

    def label(self, d: dict[str, str]) -> str:
        return f"{d["name"]}-{get_server_args().page_size:>{d["width"]}}"

    def dynamic(self, name: str) -> object:
        return getattr(getattr(self, "server_args"), name)

    async def run(self) -> None:
        try:
            await self.step()
        except* (ValueError, KeyError) as group:
            print(group, get_server_args().dp_size)
"""

SCHEDULER = """
from runtime import get_server_args


def chunk() -> int:
    sa = get_server_args()
    return sa.chunked_prefill_size


class Scheduler:
    def __init__(self, runner):
        self.runner = runner

    def page(self) -> int:
        return self.runner.model_runner.server_args.page_size

    def pp(self) -> int:
        return getattr(self.runner.server_args, "pp_size")
"""


@pytest.fixture
def corpus(repo):
    repo.config('target_version = "3.12"\n')
    repo.write("pkg/args.py", ARGS)
    repo.write("pkg/manager.py", MANAGER)
    repo.write("pkg/scheduler.py", SCHEDULER)
    return repo


def test_check_reads_newer_grammar_and_subclass_annotations(corpus):
    """PEP 695, `type` aliases, PEP 701 f-strings and except* parse; reads through them are counted."""
    code, out, err = corpus.run("explain", "pkg/manager.py")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[:-1] == [
        "pkg/manager.py:17:19: field 'tp_size' read raw (parameter) -- use get_parallel().tp_size",
        "pkg/manager.py:20:19: field 'model_path' read raw (attribute) -- use get_model().model_path",
        "pkg/manager.py:20:54: field 'host' read raw (attribute) -- use get_serving().host",
        "pkg/manager.py:20:78: field 'port' read raw (attribute) -- use get_serving().port",
        "pkg/manager.py:23:31: field 'page_size' read raw (direct) -- use get_schedule().page_size",
        "pkg/manager.py:26:16: field '*' read raw (computed) -- read the field by name through the context (get_context().value(name))",
        "pkg/manager.py:32:26: field 'dp_size' read raw (direct) -- use get_parallel().dp_size",
    ]


def test_target_version_refuses_newer_grammar(corpus):
    """A project that says it runs on 3.11 hears that a type alias needs 3.12, and check exits 2."""
    corpus.config('target_version = "3.11"\n')
    code, out, _ = corpus.run("check")
    assert code == 2
    assert (
        "pkg/args.py: cannot parse: Python 3.12 syntax (a type alias statement), but target_version is 3.11 (line 8, column 1)"
        in out
    )
    assert (
        "pkg/manager.py: cannot parse: Python 3.12 syntax (type parameters), but target_version is 3.11 (line 5, column 12)"
        in out
    )


def test_fix_rewrites_only_published_reads_and_lists_the_rest(corpus):
    """Getter reads are rewritten, also in a PEP 695 file; held or passed records are listed for review."""
    code, out, err = corpus.run("fix")
    assert (code, out) == (1, "")
    notes = err.splitlines()
    review = [line for line in notes if " review: " in line]
    assert [line.split(": field ")[0] for line in review] == [
        "pkg/manager.py:17:19",
        "pkg/manager.py:20:19",
        "pkg/manager.py:20:54",
        "pkg/manager.py:20:78",
        "pkg/scheduler.py:14:16",
        "pkg/scheduler.py:17:16",
    ]
    assert review[4].endswith(
        "review: the record is held per instance here and may not be the process's published one "
        "-- rewrite it by hand, or set one_record_per_process = true in ratchet.toml"
    )
    assert review[0].endswith(
        "review: the record is passed in here and may not be the process's published one -- rewrite it by "
        "hand, or set one_record_per_process = true in ratchet.toml"
    )
    assert "pkg/manager.py:26:16: field '*' not fixed: getattr() with a name computed at run time" in err
    assert notes[-1] == "sgconf-ratchet: fixed 3 site(s) in 2 file(s)"
    manager = corpus.read("pkg/manager.py")
    assert 'return f"{d["name"]}-{get_schedule().page_size:>{d["width"]}}"' in manager
    assert "print(group, get_parallel().dp_size)" in manager and "class Queue[T]:" in manager
    assert "from runtime import get_parallel, get_schedule" in manager
    scheduler = corpus.read("pkg/scheduler.py")
    assert "    return get_schedule().chunked_prefill_size\n" in scheduler and "sa = " not in scheduler
    assert "self.runner.model_runner.server_args.page_size" in scheduler


def test_fix_with_one_record_per_process_rewrites_held_records(corpus):
    """With one_record_per_process the held and passed records are the published one and are rewritten."""
    corpus.config('target_version = "3.12"\none_record_per_process = true\n')
    code, _, err = corpus.run("fix")
    assert code == 1  # the computed getattr stays
    assert err.splitlines()[-1] == "sgconf-ratchet: fixed 9 site(s) in 2 file(s)"
    assert "return get_schedule().page_size" in corpus.read("pkg/scheduler.py")
    assert "get_model().model_path!r} on {get_serving().host}:{get_serving().port}" in corpus.read("pkg/manager.py")


def test_a_second_fix_changes_nothing_and_is_answered_from_the_caches(corpus, monkeypatch):
    """Once a fix has left every file as it was, the next one parses no file: both caches answer."""
    corpus.run("fix")
    code, _, err = corpus.run("fix")  # the files the first run rewrote are scanned once more
    assert code == 1 and err.splitlines()[-1] == "sgconf-ratchet: fixed 0 site(s) in 0 file(s)"
    import tools.ratchet.fixrun as fixrun

    def refuse(*args, **kwargs):
        raise AssertionError("parsed again")

    monkeypatch.setattr(fixrun, "_fix_job", refuse)
    code, _, err = corpus.run("fix")
    assert code == 1 and err.splitlines()[-1] == "sgconf-ratchet: fixed 0 site(s) in 0 file(s)"


def _equivalence_inputs() -> list[pytest.param]:
    out = []
    for folder in ("runtime", "engine", "mem_cache", "attention", "sgconf", "tools"):
        for path in sorted((PROJECT / folder).rglob("*.py")):
            out.append(pytest.param(path.read_text(encoding="utf-8"), id=str(path.relative_to(PROJECT))))
    for rule in RULES:
        for i, case in enumerate(rule.INVALID):
            out.append(pytest.param(textwrap.dedent(case.code), id=f"{rule.kind}-invalid-{i}"))
    return out


def _scan_rows(text: str) -> list[tuple[int, int, str, str]]:
    settings = ScanSettings(fields=SETTINGS.fields | {"items", "name", "path", "value", "text"})
    return [
        (s.line, s.col, s.kind, s.field)
        for s in collect("m.py", scan_module(ast.parse(text), text, settings), []).sites
    ]


@pytest.mark.parametrize("text", _equivalence_inputs())
def test_a_lowered_file_scans_like_the_original(text):
    """Lowered with every f-string turned into a tuple, a file gives exactly the sites of the original."""
    lowered = lower(text + "\ntype _Pad = int\n", every_string=True)
    assert lowered is not None
    assert _scan_rows(lowered) == _scan_rows(text)


def test_a_file_no_parser_reads_keeps_the_c_parsers_message():
    """Real syntax errors are still reported with the interpreter's own message and position."""
    result = scan_text("bad.py", "def f(:\n    pass\n", SETTINGS)
    assert result.error == "cannot parse: invalid syntax (line 1, column 7)"
