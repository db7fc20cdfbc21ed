"""A secret is never shown, from whichever source it came and however it changed; `***` is spelled in one module.

One runtime schema with a hot secret: the secret is set from a config file, the
environment and the command line, then overridden and reverted. Every representation a
user or an operator can reach is rendered and searched for the secret: reprs of records,
receipts, changes, log entries and events, dumps, `explain()`, the log lines, and the
message of a refused value.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
import structlog

from runtime import publish, reset
from runtime.group_results import digests
from sgconf import ConfigError, Schema, setting
from sgconf.dump import nested, to_toml
from sgconf.fields import FieldValueError

ROOT = Path(__file__).resolve().parents[1]
SECRET_FILE, SECRET_ENV, SECRET_CLI, SECRET_NEW = (
    "file-key-000001",
    "env-key-0000002",
    "cli-key-0000003",
    "new-key-0000004",
)


def _long(value: Any) -> None:
    if value is not None and len(value) < 8:
        raise FieldValueError("must be at least 8 characters")


def make_schema() -> Schema:
    schema = Schema("secretrt", env_prefix="SECRETRT_")

    @schema.namespace("auth")
    class AuthConfig:
        token: str | None = setting(None, help="the token", secret=True, hot=True, checks=[_long])
        level: int = setting(1, help="a plain setting", hot=True)

    return schema.freeze()  # type: ignore[return-value]


SCHEMA = make_schema()


@pytest.fixture(autouse=True)
def _clean():
    yield
    reset()


def test_a_secret_from_every_source_and_overridden_is_never_shown(tmp_path: Path) -> None:
    config = tmp_path / "app.toml"
    config.write_text(f'[auth]\ntoken = "{SECRET_FILE}"\n', encoding="utf-8")
    loaded_file = SCHEMA.load([], env={"SECRETRT_CONFIG": str(config)})
    loaded_env = SCHEMA.load([], env={"SECRETRT_TOKEN": SECRET_ENV})
    loaded = SCHEMA.load(["--token", SECRET_CLI, "--config", str(config)], env={"SECRETRT_TOKEN": SECRET_ENV})
    events: list[Any] = []
    with structlog.testing.capture_logs() as logs:
        ctx = publish(loaded.record, role="test")
        ctx.subscribe(events.append)
        receipt = ctx.override("ops", token=SECRET_NEW, level=2)
        undone = receipt.revert()
        with pytest.raises(ConfigError) as refused:
            ctx.override("ops", token="short")
    outputs = [
        repr(loaded_file),
        repr(loaded_env),
        repr(loaded),
        repr(loaded.record),
        repr(ctx.snapshot()),
        repr(receipt),
        repr(receipt.changes),
        repr(undone),
        repr(ctx.overrides_log()),
        repr(events),
        json.dumps([rec.as_dict() for rec in ctx.overrides_log()]),
        json.dumps(ctx.resolved_dict()),
        repr(ctx.explain("token")),
        repr(loaded.chain("token")),
        json.dumps(nested(ctx.value("token") and {"token": ctx.value("token"), "level": 1}, schema=SCHEMA)),
        to_toml(nested({"token": SECRET_CLI, "level": 1}, schema=SCHEMA), schema=SCHEMA),
        repr(logs),
        str(refused.value),
    ]
    text = "\n".join(outputs)
    for secret in (SECRET_FILE, SECRET_ENV, SECRET_CLI, SECRET_NEW, "short"):
        assert secret not in text
    assert "***" in text
    # the real value is still there for code that needs it
    assert ctx.value("token") == SECRET_CLI


def test_ranks_with_different_secrets_are_reported_as_different() -> None:
    """The config group compares per-field digests of the real values, never of their redacted form."""
    left = publish(SCHEMA.build(token=SECRET_ENV), role="test")
    mine = digests(left)
    right = publish(SCHEMA.build(token=SECRET_CLI), role="test")
    theirs = digests(right)
    assert mine["token"] != theirs["token"] and mine["level"] == theirs["level"]


def _docstrings(tree: ast.AST) -> set[int]:
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def test_the_redaction_mark_is_spelled_in_one_module() -> None:
    """Every other module redacts through `sgconf.redaction` (docstrings may still say what a reader sees)."""
    spelled = set()
    for package in ("sgconf", "runtime", "mem_cache", "attention", "engine", "tools"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            docs = _docstrings(tree)
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and "***" in node.value
                    and id(node) not in docs
                ):
                    spelled.add(path.relative_to(ROOT).as_posix())
    assert sorted(spelled) == ["sgconf/redaction.py"]


def test_every_path_of_a_hot_secret_renders_redacted() -> None:
    """Validated, committed, rolled back, scoped and reverted: `str` and `repr` of each value handed out stay redacted."""
    events: list[Any] = []

    def refuse(receipt: Any) -> None:
        raise OSError("the side effect failed")

    with structlog.testing.capture_logs() as logs:
        ctx = publish(SCHEMA.build(), role="test")
        ctx.subscribe(events.append)
        proposal = ctx.validate_override("ops", token=SECRET_NEW)
        receipt = ctx.commit(proposal)
        with pytest.raises(OSError):
            ctx.apply_override("ops", refuse, token=SECRET_ENV)
        with ctx.scoped(token=SECRET_CLI) as snap:
            scoped = (repr(snap), str(snap.auth), repr(ctx.overrides_log()[-1]))
        undone = receipt.revert()
    rendered = [
        repr(proposal),
        repr(proposal.changes),
        str(receipt),
        str(receipt.record),
        str(receipt.changes[0]),
        str(events),
        repr(undone.record),
        repr(ctx.overrides_log()),
        repr(logs),
        repr(ctx.explain("token")),
        *scoped,
    ]
    text = "\n".join(rendered)
    for secret in (SECRET_NEW, SECRET_ENV, SECRET_CLI):
        assert secret not in text
    assert text.count("***") >= 8
    assert proposal.values == {"token": SECRET_NEW}  # what code that applies it needs
