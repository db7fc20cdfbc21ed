"""The fix codemod: before/after snippets, idempotence, skipped sites, and a clean check after."""

from __future__ import annotations

import textwrap

import pytest

from sgconf import SERVING
from tools.ratchet.codemod import WRITE_REASON, fix_text
from tools.ratchet.settings import ScanSettings

SETTINGS = ScanSettings(fields=frozenset(SERVING.field_names()))
ACCESSORS = {name: SERVING.accessor_of(name) for name in SERVING.field_names()}

CASES = [
    pytest.param(
        """
        def size(self):
            return self.server_args.page_size
        """,
        """
        from runtime import get_schedule

        def size(self):
            return get_schedule().page_size
        """,
        id="attribute",
    ),
    pytest.param(
        """
        import os

        def f(sa):
            return getattr(sa.server_args, "page_size", 1), getattr(get_server_args(), 'tp_size')
        """,
        """
        import os
        from runtime import get_parallel, get_schedule

        def f(sa):
            return get_schedule().page_size, get_parallel().tp_size
        """,
        id="getattr",
    ),
    pytest.param(
        """
        from runtime import get_exec


        def backend():
            sa = get_server_args()
            # the prefill side may differ
            return (sa.attention_backend, sa.prefill_attention_backend)  # pair
        """,
        """
        from runtime import get_exec


        def backend():
            # the prefill side may differ
            return (get_exec().kernel.attention_backend, get_exec().kernel.prefill_attention_backend)  # pair
        """,
        id="alias-removed-comments-kept",
    ),
    pytest.param(
        """
        def f(server_args: ServerArgs):
            if server_args.enable_hierarchical_cache:
                sa = server_args
                return sa.hicache_ratio
        """,
        """
        from runtime import get_memory

        def f(server_args: ServerArgs):
            if get_memory().enable_hierarchical_cache:
                return get_memory().hicache_ratio
        """,
        id="parameter-and-alias-of-parameter",
    ),
    pytest.param(
        """
        def f():
            sa = get_server_args()
            return sa.page_size
        """,
        """
        from runtime import get_schedule

        def f():
            return get_schedule().page_size
        """,
        id="alias-only-statement-removed",
    ),
    pytest.param(
        """
        def f(cond):
            sa = get_server_args()
            if cond:
                return sa.page_size
            return sa.tp_size
        """,
        """
        from runtime import get_parallel, get_schedule

        def f(cond):
            if cond:
                return get_schedule().page_size
            return get_parallel().tp_size
        """,
        id="alias-read-in-both-arms",
    ),
]


@pytest.mark.parametrize(("before", "after"), CASES)
def test_before_after(before, after):
    """Each raw read becomes its accessor read, the import is added once, formatting is kept."""
    result = fix_text("m.py", textwrap.dedent(before).lstrip("\n"), SETTINGS, ACCESSORS, per_process=True)
    assert result.skipped == ()
    assert result.new == textwrap.dedent(after).lstrip("\n")
    again = fix_text("m.py", result.new, SETTINGS, ACCESSORS, per_process=True)
    assert (again.changed, again.fixed, again.skipped) == (False, (), ())


def test_unsafe_sites_are_listed_not_touched():
    """Writes, walrus bindings and aliases used otherwise are listed with the reason and left as they are."""
    code = textwrap.dedent(
        """
        def f(self):
            cfg = self.server_args
            launch(cfg)
            n = cfg.tp_size
            self.server_args.page_size = 4
            m = (sa := get_server_args()).dp_size
        """
    ).lstrip("\n")
    result = fix_text("m.py", code, SETTINGS, ACCESSORS, per_process=True)
    assert result.new == code
    assert [(s.line, s.kind, reason) for s, reason in result.skipped] == [
        (4, "alias", "alias 'cfg' is used for more than field reads"),
        (5, "write", WRITE_REASON),
        (6, "direct", "the record is also bound by `:=` here"),
    ]


def test_allowed_reads_are_not_rewritten():
    """A read under an allow comment is not counted, so the codemod leaves it."""
    code = "x = get_server_args().page_size  # ratchet: allow(raw startup value)\n"
    result = fix_text("m.py", code, SETTINGS, ACCESSORS, per_process=True)
    assert (result.changed, result.skipped) == (False, ())


def test_fix_then_check_is_clean(repo):
    """After `fix`, `check` passes; `--diff` prints the change without writing it."""
    repo.config("one_record_per_process = true\n")
    source = "class W:\n    def f(self):\n        return self.server_args.page_size\n"
    repo.write("pkg/w.py", source)
    assert repo.run("check")[0] == 1
    code, out, err = repo.run("fix", "--diff")
    assert code == 0
    assert out.startswith("--- a/pkg/w.py\n+++ b/pkg/w.py\n")
    assert "-        return self.server_args.page_size\n+        return get_schedule().page_size\n" in out
    assert err == "sgconf-ratchet: would fix 1 site(s) in 1 file(s)\n"
    assert repo.read("pkg/w.py") == source
    assert repo.run("fix") == (0, "", "sgconf-ratchet: fixed 1 site(s) in 1 file(s)\n")
    assert repo.read("pkg/w.py") == (
        "from runtime import get_schedule\n\nclass W:\n    def f(self):\n        return get_schedule().page_size\n"
    )
    assert repo.run("check")[0] == 0
    assert repo.run("fix") == (0, "", "sgconf-ratchet: fixed 0 site(s) in 0 file(s)\n")


def test_fix_exits_one_when_sites_are_left(repo):
    """Sites the codemod cannot fix are printed and the exit status is 1."""
    repo.config("one_record_per_process = true\n")
    repo.write("pkg/w.py", "def f(server_args):\n    del server_args.page_size\n")
    code, out, err = repo.run("fix")
    assert (code, out) == (1, "")
    assert err.splitlines()[0] == f"pkg/w.py:2:9: field 'page_size' not fixed: {WRITE_REASON}"


def test_names_bound_differently_on_branches_are_not_rewritten():
    """A name that holds the record on some paths only is listed, and so are reads of its bindings."""
    code = textwrap.dedent(
        """
        def f(self, cond):
            if cond:
                sa = get_server_args()
                n = sa.tp_size
            else:
                sa = self.server_args
            m = sa.page_size
            cfg = get_server_args()
            if cond:
                cfg = None
            return cfg.dp_size
        """
    ).lstrip("\n")
    result = fix_text("m.py", code, SETTINGS, ACCESSORS, per_process=True)
    assert result.new == code
    assert [(s.line, s.kind, reason) for s, reason in result.skipped] == [
        (4, "alias", "alias 'sa' is also read where branches that bind it differently join"),
        (7, "alias", "'sa' holds the record on some paths only"),
        (11, "alias", "'cfg' holds the record on some paths only"),
    ]


def test_fix_keeps_a_declared_source_encoding(repo):
    """A file with a latin-1 coding cookie is written back in latin-1, not re-encoded as UTF-8."""
    repo.config("one_record_per_process = true\n")
    source = "# -*- coding: latin-1 -*-\nNAME = 'caf\xe9'\ndef f(self):\n    return self.server_args.page_size\n"
    path = repo.root / "pkg" / "enc.py"
    path.parent.mkdir()
    path.write_bytes(source.encode("latin-1"))
    assert repo.run("fix")[0] == 0
    assert path.read_bytes() == (
        "# -*- coding: latin-1 -*-\nfrom runtime import get_schedule\n\nNAME = 'caf\xe9'\n"
        "def f(self):\n    return get_schedule().page_size\n"
    ).encode("latin-1")


IMPORT_CASES = [
    pytest.param(
        """
        from runtime import get_server_args, get_memory

        def f():
            return get_server_args().page_size, get_memory().hicache_ratio
        """,
        """
        from runtime import get_schedule, get_memory

        def f():
            return get_schedule().page_size, get_memory().hicache_ratio
        """,
        id="getter-import-removed",
    ),
    pytest.param(
        """
        import os
        import runtime
        from runtime import get_server_args

        def f():
            sa = get_server_args()
            return sa.page_size, runtime.get_server_args().tp_size
        """,
        """
        import os
        from runtime import get_parallel, get_schedule

        def f():
            return get_schedule().page_size, get_parallel().tp_size
        """,
        id="module-and-name-imports-removed",
    ),
    pytest.param(
        """
        from runtime import get_server_args
        from other import unused_before

        def f(self):
            return self.server_args.page_size, get_server_args()
        """,
        """
        from runtime import get_schedule, get_server_args
        from other import unused_before

        def f(self):
            return get_schedule().page_size, get_server_args()
        """,
        id="imports-still-used-or-unused-before-stay",
    ),
]


@pytest.mark.parametrize(("before", "after"), IMPORT_CASES)
def test_imports_made_unused_are_removed(before, after):
    """fix drops the imports whose every use it rewrote, adds only the accessors it uses, and is idempotent."""
    result = fix_text("m.py", textwrap.dedent(before).lstrip("\n"), SETTINGS, ACCESSORS, per_process=True)
    assert result.new == textwrap.dedent(after).lstrip("\n")
    again = fix_text("m.py", result.new, SETTINGS, ACCESSORS, per_process=True)
    assert (again.changed, again.fixed, again.skipped) == (False, (), ())


def test_records_built_in_place_are_left_to_the_author():
    """A record built by a constructor or a copy is not the published one, so its reads are not rewritten."""
    code = textwrap.dedent(
        """
        def main(ns):
            sa = ServerArgs.from_cli_args(ns)
            n = sa.tp_size
            m = dataclasses.replace(get_server_args(), page_size=2).page_size
            return n, m
        """
    ).lstrip("\n")
    result = fix_text("m.py", code, SETTINGS, ACCESSORS, per_process=True)
    assert result.new == code
    reason = "the record is built here, not the published one; an accessor would read another value"
    assert [(s.line, reason_) for s, reason_ in result.skipped] == [(3, reason), (4, reason)]


def test_fix_rewrites_exactly_the_sites_check_reports():
    """On a mixed module every counted site is either fixed or listed, and a re-scan finds only the listed ones."""
    from tools.ratchet.scanner import scan_text

    code = textwrap.dedent(
        """
        from runtime import get_server_args

        class Worker:
            def __init__(self, runner, **kwargs):
                self.n = runner.model_runner.server_args.tp_size
                args = kwargs["server_args"]
                self.p = args.page_size
                self.q = getattr(self.server_args, "dp_size")
                cfg = get_server_args()
                launch(cfg)
                self.r = cfg.hicache_ratio

            def g(self, server_args):
                if (sa := get_server_args()).enable_hierarchical_cache:
                    return server_args.max_running_requests + len("é") + server_args.page_size
        """
    ).lstrip("\n")
    before = {(s.line, s.col, s.field) for s in scan_text("m.py", code, SETTINGS).sites}
    result = fix_text("m.py", code, SETTINGS, ACCESSORS, per_process=True)
    fixed = {(s.line, s.col, s.field) for s in result.fixed}
    skipped = {(s.line, s.col, s.field) for s, _ in result.skipped}
    assert fixed | skipped == before and not fixed & skipped
    assert len(fixed) == 5
    after = scan_text("m.py", result.new, SETTINGS).sites
    assert sorted(s.field for s in after) == sorted(field for _, _, field in skipped)
    compile(result.new, "m.py", "exec")


def test_fix_handles_expressions_as_deep_as_cpython_accepts():
    """An 800-term expression (far past the default recursion limit for libcst) is rewritten, not refused."""
    code = "def f(self):\n    return " + " + ".join(["self.server_args.page_size"] * 800) + "\n"
    result = fix_text("m.py", code, SETTINGS, ACCESSORS, per_process=True)
    assert result.error is None
    assert len(result.fixed) == 800
    assert "server_args" not in result.new.split("\n", 2)[2]


BELOW = """
x = 1
from runtime import get_server_args


def f():
    return get_server_args().page_size
"""


@pytest.mark.parametrize(
    "before", [*(case.values[0] for case in CASES), *(case.values[0] for case in IMPORT_CASES), BELOW]
)
def test_the_text_rewrite_and_the_libcst_rewrite_agree(before, monkeypatch):
    """Where the fast text edit applies a plan it gives exactly libcst's result; where it cannot, libcst does it."""
    import tools.ratchet.codemod as codemod

    code = textwrap.dedent(before).lstrip("\n")
    fast = fix_text("m.py", code, SETTINGS, ACCESSORS, per_process=True)
    monkeypatch.setattr(codemod, "text_rewrite", lambda *args: None)
    slow = fix_text("m.py", code, SETTINGS, ACCESSORS, per_process=True)
    assert (fast.new, fast.fixed, fast.error) == (slow.new, slow.fixed, slow.error)
    assert slow.changed


def test_imports_below_the_code_are_left_to_the_libcst_rewrite():
    """An import below the code that the rewrite made unused is removed, by the whole-module path."""
    from tools.ratchet.codemod import plan_fixes
    from tools.ratchet.scanner import scan_module
    from tools.ratchet.textfix import text_rewrite

    code = textwrap.dedent(BELOW).lstrip("\n")
    tree = __import__("ast").parse(code)
    plan = plan_fixes("m.py", code, scan_module(tree, code, SETTINGS), ACCESSORS, lambda site: False)
    assert text_rewrite(code, tree, plan, "runtime", SETTINGS) is None
    result = fix_text("m.py", code, SETTINGS, ACCESSORS)
    assert "get_server_args" not in result.new and "return get_schedule().page_size" in result.new
