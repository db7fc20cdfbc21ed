"""check / update / explain on throwaway repositories: exit codes, messages, baseline file."""

from __future__ import annotations

import json

import pytest

from tools.ratchet.report import EXTRA_RULES
from tools.ratchet.sites import KINDS

TWO_ALIAS_READS = """
from runtime import get_server_args
sa = get_server_args()
a = sa.page_size
b = sa.tp_size
"""


def test_clean_repo_exits_zero(repo):
    """No raw reads and an empty baseline: exit 0 and a one-line summary."""
    repo.write("pkg/a.py", "from runtime import get_schedule\nx = get_schedule().page_size\n")
    assert repo.run("check") == (0, "sgconf-ratchet: 1 file checked, 0 counted sites in 0 files: ok\n", "")


def test_increase_fails_with_every_site(repo):
    """A count above its baseline fails with each site, its field and the accessor to use."""
    repo.config('\n[counts."pkg/a.py"]\nalias = 1\n')
    repo.write("pkg/a.py", TWO_ALIAS_READS)
    code, out, _ = repo.run("check")
    assert code == 1
    assert out.splitlines() == [
        "pkg/a.py:3:5: field 'page_size' read raw (alias) -- use get_schedule().page_size",
        "pkg/a.py:4:5: field 'tp_size' read raw (alias) -- use get_parallel().tp_size",
        "raw alias reads of ServerArgs fields rose in pkg/a.py: 1 \u2192 2",
        "sgconf-ratchet: 1 file checked, 2 counted sites in 1 file: 1 over the baseline in 1 file",
    ]


def test_file_missing_from_baseline_has_baseline_zero(repo):
    """A file the baseline does not list may hold no raw read at all."""
    repo.write("pkg/new.py", "def f(self):\n    return self.server_args.attention_backend\n")
    code, out, _ = repo.run("check")
    assert code == 1
    assert out.splitlines()[0] == (
        "pkg/new.py:2:12: field 'attention_backend' read raw (attribute) -- use get_exec().kernel.attention_backend"
    )


def test_writes_are_pointed_at_overrides(repo):
    """A write is reported with the override advice, not with an accessor that cannot write."""
    repo.write("pkg/a.py", "def f(server_args):\n    server_args.page_size = 16\n")
    code, out, _ = repo.run("check")
    assert code == 1
    assert out.splitlines()[0] == (
        "pkg/a.py:2:5: field 'page_size' written raw -- change it through an override, never on the record"
    )
    code, out, _ = repo.run("check", "--format", "json")
    (problem,) = json.loads(out)["problems"]
    assert problem["message"] == (
        "raw write of 'page_size' (write count 1, baseline 0) -- change it through an override, never on the record"
    )


def test_decrease_demands_update(repo):
    """Fewer reads than the baseline fails until `update` locks the progress in."""
    repo.config('\n[counts."pkg/a.py"]\nalias = 2\n\n[counts."pkg/gone.py"]\ndirect = 1\n')
    repo.write("pkg/a.py", "sa = get_server_args()\nx = sa.page_size\n")
    code, out, _ = repo.run("check")
    assert code == 1
    assert out.splitlines()[:2] == [
        "1 site fixed in pkg/a.py; run `sgconf-ratchet update` to lock in the progress",
        "1 site fixed in pkg/gone.py; run `sgconf-ratchet update` to lock in the progress",
    ]
    assert repo.run("update") == (0, "sgconf-ratchet: baseline updated, 3 -> 1 counted site(s)\n", "")
    text = repo.read("ratchet.toml")
    assert text.startswith('[config]\nfield_source = "sgconf:SERVING"\ninclude = ["pkg/**"]\n')
    assert text.endswith('[counts."pkg/a.py"]\nalias = 1\n')
    assert "gone.py" not in text
    assert repo.run("check")[0] == 0


def test_update_is_stable_and_sorted(repo):
    """Counts are written sorted by path and kind, and a second update changes nothing."""
    repo.write("pkg/b.py", "def f(server_args):\n    return server_args.page_size, get_server_args().tp_size\n")
    repo.write("pkg/a.py", TWO_ALIAS_READS)
    repo.config('\n[counts."pkg/a.py"]\nalias = 2\n\n[counts."pkg/b.py"]\ndirect = 1\nparameter = 1\n')
    before = repo.read("ratchet.toml")
    assert repo.run("update") == (0, "sgconf-ratchet: baseline already up to date\n", "")
    assert repo.read("ratchet.toml") == before


def test_update_never_raises_counts(repo):
    """update refuses to raise a count and leaves ratchet.toml untouched."""
    repo.write("pkg/a.py", TWO_ALIAS_READS)
    before = repo.read("ratchet.toml")
    code, out, err = repo.run("update")
    assert code == 1
    assert err.splitlines() == [
        "sgconf-ratchet: update refuses to raise the baseline: 2 more counted site(s) in 1 file(s)",
        "  pkg/a.py: alias 0 \u2192 2",
        "-- this code base has no baseline yet: write the first one with `sgconf-ratchet init`",
    ]
    assert repo.read("ratchet.toml") == before


def test_allow_increase_needs_and_records_a_reason(repo):
    """--allow-increase without --reason is a usage error; with one, the reason is written."""
    repo.write("pkg/a.py", TWO_ALIAS_READS)
    assert repo.run("update", "--allow-increase")[0] == 2
    code, out, _ = repo.run("update", "--allow-increase", "--reason", "migrating in #12")
    assert code == 0
    assert out.splitlines()[0] == "pkg/a.py: alias raised from 0 to 2 (migrating in #12)"
    assert repo.read("ratchet.toml").endswith('[counts."pkg/a.py"]\nalias = 2\nreason = "migrating in #12"\n')
    assert repo.run("check")[0] == 0


def test_update_keeps_tables_above_and_refuses_tables_after_the_counts(repo):
    """update rewrites only the counts section; tables after it are refused, nothing is written."""
    repo.write("pkg/a.py", "x = 1\n")
    repo.config('\n[counts."pkg/a.py"]\nalias = 1\n\n[[exempt]]\npath = "pkg/a.py"\nfield = "*"\nreason = "r"\n')
    before = repo.read("ratchet.toml")
    code, out, err = repo.run("update")
    assert (code, out) == (2, "")
    assert err.startswith(
        "sgconf-ratchet: ratchet.toml has other tables after the counts section (exempt); update would drop them"
    )
    assert repo.read("ratchet.toml") == before
    repo.config('\n[[exempt]]\npath = "pkg/a.py"\nfield = "*"\nreason = "r"\n\n[counts."pkg/a.py"]\nalias = 1\n')
    (repo.root / "ratchet.toml").chmod(0o644)
    assert repo.run("update")[0] == 0
    text = repo.read("ratchet.toml")
    assert text.endswith(
        'reason = "r"\n\n# Raw reads per file and kind, written by `sgconf-ratchet update`; keep this section last.\n'
    )
    assert (repo.root / "ratchet.toml").stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in repo.root.iterdir()) == [".sgconf-ratchet-cache", "pkg", "ratchet.toml"]


def test_stale_and_reasonless_allow_comments_fail(repo):
    """An allow comment with no read on its line, or without a reason, is a violation."""
    repo.write(
        "pkg/a.py",
        """
        x = 1  # ratchet: allow(left over)
        y = get_server_args().page_size  # ratchet: allow
        z = get_server_args().tp_size  # ratchet: allow(raw value for the startup log)
        """,
    )
    repo.config('\n[counts."pkg/a.py"]\ndirect = 1\n')
    code, out, _ = repo.run("check")
    assert code == 1
    assert out.splitlines()[:2] == [
        "pkg/a.py:1:8: allow comment with no raw read on its line -- remove the comment",
        "pkg/a.py:2:34: allow comment without a reason -- write `# ratchet: allow(<why this raw read is needed>)`",
    ]


def test_unparsable_file_exits_two_and_blocks_update(repo):
    """A file that does not parse is reported with its error (exit 2) and update writes nothing."""
    repo.write("pkg/bad.py", "def f(server_args:\n")
    repo.write("pkg/a.py", "x = 1\n")
    code, out, _ = repo.run("check")
    assert code == 2
    assert any(line.startswith("pkg/bad.py: cannot parse: ") for line in out.splitlines())
    before = repo.read("ratchet.toml")
    code, _, err = repo.run("update")
    assert code == 2
    assert "baseline not updated" in err
    assert repo.read("ratchet.toml") == before


def test_unparsable_file_without_any_token_is_still_reported(repo):
    """The prefilter skips libcst, not the syntax check: a broken file with no token fails too."""
    repo.write("pkg/plain.py", "def f(:\n")
    code, out, _ = repo.run("check")
    assert code == 2
    assert any(line.startswith("pkg/plain.py: cannot parse: ") for line in out.splitlines())
    code, out, _ = repo.run("check")  # and not hidden by the cache on a second run
    assert code == 2


def test_undecodable_file_exits_two(repo):
    """Bytes Python would not decode (bad UTF-8, a misspelt coding cookie) are an error, token or not."""
    (repo.root / "pkg").mkdir()
    (repo.root / "pkg" / "latin.py").write_bytes(b"x = '\xff\xfe'\n")
    code, out, _ = repo.run("check")
    assert code == 2
    assert out.splitlines()[0].startswith("pkg/latin.py: cannot decode: ")
    (repo.root / "pkg" / "latin.py").write_bytes(b"# -*- coding: latin-1 -*-\nx = '\xff\xfe'\n")
    assert repo.run("check")[0] == 0
    (repo.root / "pkg" / "typo.py").write_bytes(b"#!/usr/bin/env python\n# -*- coding: uft-8 -*-\nx = 1\n")
    code, out, _ = repo.run("check")
    assert code == 2
    assert out.splitlines()[0] == "pkg/typo.py: cannot decode: unknown encoding: uft-8"


def test_exclude_globs_and_explicit_paths(repo):
    """Excluded files are skipped; explicit paths limit the check to those files."""
    repo.write("pkg/tests/test_x.py", "x = get_server_args().page_size\n")
    repo.write("pkg/a.py", "x = get_server_args().page_size\n")
    repo.write("pkg/b.py", "x = 1\n")
    code, out, _ = repo.run("check")
    assert code == 1
    assert "pkg/tests" not in out
    assert repo.run("check", "pkg/b.py")[0] == 0


def test_exempt_entries(repo):
    """An [[exempt]] entry uncounts its reads; one that matches nothing is stale on a full run."""
    repo.write("pkg/ctx.py", "def publish(server_args):\n    return server_args.page_size\n")
    repo.config(
        """
        [[exempt]]
        path = "pkg/ctx.py"
        field = "*"
        reason = "the context projects the raw record into bags"

        [[exempt]]
        path = "pkg/old.py"
        field = "tp_size"
        reason = "gone"
        """
    )
    code, out, _ = repo.run("check")
    assert code == 1
    assert (
        out.splitlines()[0]
        == "ratchet.toml: [[exempt]] path 'pkg/old.py' field 'tp_size' matches no read -- remove the entry"
    )
    assert repo.run("check", "pkg/ctx.py")[0] == 0


def test_explain_lists_every_site(repo):
    """explain shows counted, allowed and exempt sites with the per-kind totals."""
    repo.write(
        "pkg/a.py",
        """
        sa = get_server_args()
        a = sa.page_size
        b = getattr(sa, "dp_size")  # ratchet: allow(debug dump)
        """,
    )
    code, out, _ = repo.run("explain", "pkg/a.py")
    assert code == 0
    assert out.splitlines() == [
        "pkg/a.py:2:5: field 'page_size' read raw (alias) -- use get_schedule().page_size",
        "pkg/a.py:3:5: field 'dp_size' read raw (getattr) -- use get_parallel().dp_size  (allowed: debug dump)",
        "pkg/a.py: counted/baseline: alias 1/0",
    ]


def test_json_and_github_formats(repo):
    """json lists problems with positions; github emits one ::error workflow command per site."""
    repo.write("pkg/a.py", "x = get_server_args().page_size\n")
    code, out, _ = repo.run("check", "--format", "json")
    data = json.loads(out)
    assert code == 1 and data["exit_code"] == 1
    assert [(p["rule"], p["path"], p["line"], p["col"], p["accessor"]) for p in data["problems"]] == [
        ("direct", "pkg/a.py", 1, 5, "get_schedule().page_size")
    ]
    code, out, _ = repo.run("check", "--format", "github")
    assert code == 1
    assert out == (
        "::error file=pkg/a.py,line=1,col=5,title=ratchet direct::raw direct read of 'page_size' "
        "(direct count 1, baseline 0) -- use get_schedule().page_size\n"
    )


def test_sarif_shape(repo):
    """SARIF 2.1.0: one rule per kind (plus the non-read problems) and results pointing at them."""
    repo.write("pkg/a.py", "def f(self):\n    self.server_args.page_size = 2\n")
    repo.write("pkg/bad.py", "server_args = (\n")
    code, out, _ = repo.run("check", "--format", "sarif")
    assert code == 2
    log = json.loads(out)
    assert log["version"] == "2.1.0"
    (run,) = log["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [*KINDS, *EXTRA_RULES]
    (result,) = run["results"]
    assert result["ruleId"] == "write"
    assert rules[result["ruleIndex"]]["id"] == "write"
    assert result["locations"][0]["physicalLocation"] == {
        "artifactLocation": {"uri": "pkg/a.py", "uriBaseId": "%SRCROOT%"},
        "region": {"startLine": 2, "startColumn": 5},
    }
    (invocation,) = run["invocations"]
    assert invocation["executionSuccessful"] is False
    assert (
        invocation["toolExecutionNotifications"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        == "pkg/bad.py"
    )


def test_config_errors_exit_two(repo, tmp_path):
    """Unknown keys, a broken field source and a missing config are clear errors, exit 2."""
    repo.write("ratchet.toml", '[config]\ngeters = ["x"]\n')
    code, _, err = repo.run("check")
    assert code == 2
    assert err.startswith("sgconf-ratchet: unknown key 'geters' in [config]; did you mean 'getters'?")
    repo.write("ratchet.toml", '[config]\nfield_source = "nope.mod:names"\n')
    code, _, err = repo.run("check")
    assert (code, err.split(":")[1].strip()) == (2, "cannot load [config] field_source 'nope.mod")
    repo.write("ratchet.toml", '[config]\nfield_source = "sgconf:SERVING"\naccessor_source = "nope.mod:accessor"\n')
    code, _, err = repo.run("check")
    assert (code, err.split(":")[1].strip()) == (2, "cannot load [config] accessor_source 'nope.mod")
    (tmp_path / "ratchet.toml").unlink()
    code, _, err = repo.run("check")
    assert code == 2 and "no ratchet.toml found" in err


def test_usage_errors_exit_two(repo):
    """Unknown commands or options exit 2 without a traceback."""
    assert repo.run("frobnicate")[0] == 2
    assert repo.run("check", "--format", "xml")[0] == 2
    assert repo.run("check", "pkg/missing.py")[0] == 2


def test_inline_fields_make_it_work_on_any_codebase(repo):
    """With an inline field list and other names, no sgconf is needed."""
    repo.write(
        "ratchet.toml",
        """
        [config]
        record_type = "EngineArgs"
        getters = ["get_engine_args"]
        attributes = ["engine_args"]
        fields = ["block_size"]
        accessor_source = "accessors_here:accessor"
        include = ["pkg/**"]
        """,
    )
    repo.write("accessors_here.py", "def accessor(name):\n    return f'get_cache().{name}'\n")
    repo.write("pkg/a.py", "x = get_engine_args().block_size\ny = get_server_args().page_size\n")
    code, out, _ = repo.run("check")
    assert code == 1
    assert out.splitlines()[0] == "pkg/a.py:1:5: field 'block_size' read raw (direct) -- use get_cache().block_size"


@pytest.mark.slow  # starts a process: `make test-fast` leaves it out
def test_check_never_imports_libcst():
    """Detection runs on the stdlib ast: a check in a fresh interpreter leaves libcst unimported."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = "import sys\nfrom tools.ratchet.cli import main\nmain(['check', '--no-cache'])\nprint('libcst' in sys.modules)\n"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(root)),
        timeout=240,
    )
    assert proc.stdout.splitlines()[-1] == "False"
