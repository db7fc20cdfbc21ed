"""Every rule's VALID / INVALID table, turned into tests by one generator."""

from __future__ import annotations

import textwrap

import pytest

from sgconf import SERVING
from tools.ratchet.rules import RULES, RULES_BY_KIND, Access, classify
from tools.ratchet.scanner import scan_text
from tools.ratchet.settings import ScanSettings
from tools.ratchet.sites import KINDS

SETTINGS = ScanSettings(fields=frozenset(SERVING.field_names()) - {"attn_tp_size", "attn_dp_size"})


def _cases(table: str) -> list[pytest.param]:
    out = []
    for rule in RULES:
        for i, case in enumerate(getattr(rule, table)):
            out.append(pytest.param(rule, case, id=f"{rule.kind}-{i}"))
    return out


def _counted(code: str) -> tuple[tuple[str, str], ...]:
    result = scan_text("snippet.py", textwrap.dedent(code), SETTINGS)
    assert result.error is None
    return tuple((s.kind, s.field) for s in result.sites if s.allowed is None)


@pytest.mark.parametrize(("rule", "code"), _cases("VALID"))
def test_valid_snippet_has_no_site(rule, code):
    """A VALID snippet produces no counted site of any kind."""
    assert _counted(code) == ()


@pytest.mark.parametrize(("rule", "case"), _cases("INVALID"))
def test_invalid_snippet_has_exactly_its_sites(rule, case):
    """An INVALID snippet produces exactly the (kind, field) sites its table row lists."""
    assert _counted(case.code) == case.expect
    assert rule.kind in {kind for kind, _ in case.expect}


def test_every_kind_has_a_rule_with_both_tables():
    """Each kind of the baseline has one rule class with VALID and INVALID examples."""
    assert tuple(RULES_BY_KIND) == ("write", "computed", "getattr", "direct", "alias", "attribute", "parameter")
    assert set(RULES_BY_KIND) == set(KINDS)
    for rule in RULES:
        assert rule.VALID and rule.INVALID, rule


def test_precedence_write_then_getattr_then_base():
    """A write wins over everything, getattr over the base the record came from."""
    assert classify(Access("alias", "attribute", True)) == "write"
    assert classify(Access("parameter", "getattr", False)) == "getattr"
    assert classify(Access("alias", "computed", False)) == "computed"
    assert classify(Access("alias", "computed", True)) == "write"
    assert classify(Access("attribute", "attribute", False)) == "attribute"


def test_positions_are_one_based():
    """Sites carry the 1-based line and column of the read."""
    result = scan_text("m.py", "x = 1\ny = get_server_args().page_size\n", SETTINGS)
    assert [(s.line, s.col, s.kind, s.field) for s in result.sites] == [(2, 5, "direct", "page_size")]


def test_allow_comment_marks_site_and_is_used():
    """A same-line allow comment keeps the site but marks it allowed with its reason."""
    code = "a = get_server_args().page_size  # ratchet: allow(raw dump for /debug)\n"
    result = scan_text("m.py", code, SETTINGS)
    assert [(s.kind, s.allowed) for s in result.sites] == [("direct", "raw dump for /debug")]
    assert [(a.line, a.reason, a.used) for a in result.allows] == [(1, "raw dump for /debug", True)]


def test_allow_without_reason_does_not_allow():
    """An allow comment with no reason suppresses nothing and is recorded with an empty reason."""
    code = "a = get_server_args().page_size  # ratchet: allow\nb = 1  # ratchet: allow()\n"
    result = scan_text("m.py", code, SETTINGS)
    assert [s.allowed for s in result.sites] == [None]
    assert [(a.line, a.reason, a.used) for a in result.allows] == [(1, "", True), (2, "", False)]


def test_configurable_names():
    """Record type, getter, attribute and parameter names all come from the settings."""
    settings = ScanSettings(
        record_type="EngineArgs",
        getters=frozenset({"get_engine_args"}),
        attributes=frozenset({"engine_args"}),
        parameters=frozenset({"eargs"}),
        fields=frozenset({"block_size"}),
    )
    code = textwrap.dedent(
        """
        a = get_engine_args().block_size
        b = self.engine_args.block_size
        def f(eargs, x: EngineArgs, server_args):
            return eargs.block_size + x.block_size + server_args.block_size
        c = get_server_args().block_size
        """
    )
    result = scan_text("m.py", code, settings)
    assert [(s.kind, s.line) for s in result.sites] == [
        ("direct", 2),
        ("attribute", 3),
        ("parameter", 5),
        ("parameter", 5),
    ]


def test_syntax_error_is_reported():
    """An unparsable file comes back with an error, not with an empty site list."""
    result = scan_text("bad.py", "def f(:\n", SETTINGS)
    assert result.sites == ()
    assert result.error is not None and result.error.startswith("cannot parse: ")


def test_allow_comments_above_defs_and_classes_are_seen():
    """Allow comments on the lines above a def, a class or between decorators are found (and stale)."""
    code = textwrap.dedent(
        """
        x = 1
        # ratchet: allow(above a def)
        def f():
            pass
        # ratchet: allow(above a class)
        @dataclass
        # ratchet: allow(between decorator and class)
        class A:
            pass
        """
    ).lstrip("\n")
    result = scan_text("m.py", code, SETTINGS)
    assert [(a.line, a.reason, a.used) for a in result.allows] == [
        (2, "above a def", False),
        (5, "above a class", False),
        (7, "between decorator and class", False),
    ]


def test_expressions_as_deep_as_cpython_accepts_are_scanned():
    """A 2000-term expression that CPython compiles is scanned, reads inside it included."""
    code = "def f(server_args):\n    return " + " + ".join(["server_args.page_size"] * 2000) + "\n"
    compile(code, "deep.py", "exec")
    result = scan_text("deep.py", code, SETTINGS)
    assert result.error is None
    assert len(result.sites) == 2000


def test_nesting_cpython_refuses_is_a_parse_error_not_a_traceback():
    """An expression too deep for CPython's own parser is reported as a parse error of the file."""
    code = "x = " + " + ".join(["a"] * 5000) + "\n"
    result = scan_text("deep.py", code, SETTINGS)
    assert (result.sites, result.error) == (
        (),
        "cannot parse: nested too deeply for Python itself -- split the expression",
    )
