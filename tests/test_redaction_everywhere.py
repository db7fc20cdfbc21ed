"""A secret is never shown, from whichever source it came and however it changed; `***` is spelled in one module.

One runtime schema with a hot secret, a secret with a declared default and a secret
mapping: the secret is set from a config file, a secrets directory, the environment and
the command line, then overridden and reverted. Every representation a user or an
operator can reach is rendered and searched for the secret: reprs of records, receipts,
changes, log entries and events, dumps, `explain()`, the log lines, `--help`, the JSON
Schema, `show` in each format, and the message of a refused value.
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
from sgconf import ConfigError, Schema, record_to_dict, setting
from sgconf.dump import nested, to_toml
from sgconf.fields import FieldValueError
from sgconf.sources import SecretsDirSource

ROOT = Path(__file__).resolve().parents[1]
SECRET_FILE, SECRET_ENV, SECRET_CLI, SECRET_NEW, SECRET_DIR, SECRET_DEFAULT = (
    "file-key-000001",
    "env-key-0000002",
    "cli-key-0000003",
    "new-key-0000004",
    "dir-key-0000005",
    "default-key-006",
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
        signing: str = setting(SECRET_DEFAULT, help="the signing key", secret=True)
        creds: dict[str, int] | None = setting(None, help="credentials by name", secret=True, hot=True)

    schema.add_source(SecretsDirSource("/nonexistent/secretrt", env_var="SECRETRT_SECRETS_DIR"), before="env")
    return schema.freeze()  # type: ignore[return-value]


SCHEMA = make_schema()


@pytest.fixture(autouse=True)
def _clean():
    yield
    reset()


def _cli(argv: list[str], env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> str:
    """What the schema's command line prints, stdout and stderr, for `argv` under `env`."""
    with pytest.MonkeyPatch.context() as mp:
        for var, value in env.items():
            mp.setenv(var, value)
        SCHEMA.main(argv)
    out = capsys.readouterr()
    return out.out + out.err


def test_a_secret_from_every_source_and_overridden_is_never_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "app.toml"
    config.write_text(f'[auth]\ntoken = "{SECRET_FILE}"\n', encoding="utf-8")
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "token").write_text(SECRET_DIR + "\n", encoding="utf-8")
    loaded_file = SCHEMA.load([], env={"SECRETRT_CONFIG": str(config)})
    loaded_env = SCHEMA.load([], env={"SECRETRT_TOKEN": SECRET_ENV})
    loaded_dir = SCHEMA.load([], env={"SECRETRT_SECRETS_DIR": str(secrets)})
    assert (loaded_dir.record.token, loaded_dir.record.signing) == (SECRET_DIR, SECRET_DEFAULT)
    every = {"SECRETRT_CONFIG": str(config), "SECRETRT_SECRETS_DIR": str(secrets), "SECRETRT_TOKEN": SECRET_ENV}
    loaded = SCHEMA.load(["--token", SECRET_CLI, "--config", str(config)], env=every)
    printed = [
        _cli(["show", "--help"], {}, capsys),
        _cli(["show", "--help=auth"], {}, capsys),
        _cli(["schema"], {}, capsys),
        repr(SCHEMA.field_info("signing")),
        repr(SCHEMA.fields()),
        json.dumps(SCHEMA.json_schema()),
    ]
    for env in ({"SECRETRT_SECRETS_DIR": str(secrets)}, every):
        for fmt in ("table", "json", "toml"):
            printed.append(_cli(["show", "--format", fmt], env, capsys))
            for name in ("token", "signing"):
                printed.append(_cli(["show", "--format", fmt, "--explain", name], env, capsys))
    assert "(default: ***) [secret]" in printed[0] and "writeOnly" in printed[2]
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
        json.dumps(nested({name: ctx.value(name) for name in SCHEMA.fields()}, schema=SCHEMA)),
        to_toml(nested({**record_to_dict(SCHEMA.build()), "token": SECRET_CLI}, schema=SCHEMA), schema=SCHEMA),
        repr(logs),
        str(refused.value),
        repr(loaded_dir),
        repr(loaded_dir.chain("token")),
        repr(loaded_dir.chain("signing")),
        *printed,
    ]
    text = "\n".join(outputs)
    for secret in (SECRET_FILE, SECRET_ENV, SECRET_CLI, SECRET_NEW, SECRET_DIR, SECRET_DEFAULT, "short"):
        assert secret not in text
    assert "***" in text
    # the real value is still there for code that needs it
    assert ctx.value("token") == SECRET_CLI
    assert ctx.value("signing") == SECRET_DEFAULT


def test_a_refused_secret_from_every_source_shows_neither_its_keys_nor_its_items(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A secret mapping with a bad item, from each source and as an override: no key, no item in any message or log."""
    config = tmp_path / "app.toml"
    config.write_text('[auth]\ncreds = {file-sekkey = "file-sekitem"}\n', encoding="utf-8")
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "SECRETRT_CREDS").write_text('{"dir-sekkey": "dir-sekitem"}\n', encoding="utf-8")
    (secrets / "token").write_text("short\n", encoding="utf-8")
    env = {
        "SECRETRT_CONFIG": str(config),
        "SECRETRT_SECRETS_DIR": str(secrets),
        "SECRETRT_CREDS": '{"env-sekkey": "env-sekitem"}',
    }
    cli = ["--creds", '{"cli-sekkey": {"cli-nested": 1}}']
    layers = [{"SECRETRT_CONFIG": str(config)}, {"SECRETRT_SECRETS_DIR": str(secrets)}, env]
    messages = []
    for one in layers:
        with pytest.raises(ConfigError) as refused:
            SCHEMA.load([], env=one)
        messages.append(str(refused.value))
    with pytest.raises(ConfigError) as refused:
        SCHEMA.load(cli, env=env)
    messages.append(str(refused.value))
    messages.append(_cli(["show", *cli], env, capsys))
    with structlog.testing.capture_logs() as logs:
        ctx = publish(SCHEMA.build(), role="test")
        with pytest.raises(ConfigError) as overridden:
            ctx.override("ops", creds={"ovr-sekkey": "ovr-sekitem"})
    messages.extend([str(overridden.value), repr(logs)])
    text = "\n".join(messages)
    for where in ("file", "dir", "env", "cli", "ovr"):
        assert f"{where}-sek" not in text
    assert "cli-nested" not in text and "short" not in text
    assert (
        text.count("$.auth.creds: expected a JSON object or null (an item is not an integer), got '***'")
        == 1 + 1 + 3 + 4 + 4 + 1
    )


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


def _chooses_the_mark(node: ast.AST) -> bool:
    """`REDACTED if ... else ...` (or the reverse): a copy of the rule `redact` states."""
    return isinstance(node, ast.IfExp) and any(
        isinstance(side, ast.Name) and side.id == "REDACTED" for side in (node.body, node.orelse)
    )


def test_the_redaction_mark_is_spelled_in_one_module() -> None:
    """Every other module redacts through `sgconf.redaction` (docstrings may still say what a reader sees).

    Neither the mark nor the choice of when to show it is written anywhere else: a
    module that holds a secret flag of its own (a change, an origin) still calls `redact`.
    """
    spelled, chosen = set(), set()
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
                if _chooses_the_mark(node):
                    chosen.add(path.relative_to(ROOT).as_posix())
    assert sorted(spelled) == ["sgconf/redaction.py"]
    assert sorted(chosen) == ["sgconf/redaction.py"]


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


def test_a_required_secret_says_required_not_a_redacted_default() -> None:
    """REQUIRED is no value: a required secret's help says `<required>` and its repr shows no `***` default."""
    from sgconf.fieldinfo import FieldInfo
    from sgconf.fields import REQUIRED
    from sgconf.flags import help_text

    schema = Schema("requiredrt", env_prefix="REQUIREDRT_")

    @schema.namespace("auth")
    class AuthConfig:
        key: str = setting(REQUIRED, help="the api key", secret=True)

    info: FieldInfo = schema.field_info("key")
    assert not info.hides(REQUIRED)
    assert help_text(info) == "the api key (default: <required>) [secret]"
    assert "default=<required>" in repr(info) and "***" not in repr(info)
