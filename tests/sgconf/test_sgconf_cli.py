"""The `sgconf` command: show (table, json, toml, explain, diff), schema, delegation, and exit 2 on bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, packaged separately before 3.11
    import tomli as tomllib

import functools as _functools

from sgconf import SERVING as _SERVING
from sgconf import ConfigError, load, resolve_once
from sgconf.cli import config_parser as _config_parser
from sgconf.cli import load_from_args as _load_from_args
from sgconf.cli import run_cli
from sgconf.serving import SERVING, fields
from tests.support import run_sgconf as run

pytestmark = pytest.mark.usefixtures("no_sgconf_env")

config_parser = _functools.partial(_config_parser, schema=_SERVING)
load_from_args = _functools.partial(_load_from_args, schema=_SERVING)


def test_show_json_is_nested_and_resolved(capsys: pytest.CaptureFixture[str]) -> None:
    """`show --format json` parses, nests by namespace (exec.kernel under exec) and holds resolved values."""
    code, out, err = run(capsys, "show", "--format", "json", "--page-size", "16", "--api-key", "sk-77")
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert list(data) == SERVING.top_level_namespaces()
    assert list(data["exec"]) == ["kernel", "graph", "mamba"]
    assert data["schedule"]["page_size"] == 16
    assert data["schedule"]["swa_full_tokens_ratio"] == 0.8
    assert data["exec"]["kernel"]["attention_backend"] == "torch_native"
    assert data["serving"]["api_key"] == "***"
    assert "sk-77" not in out


def test_show_toml_parses_and_loads_back_to_the_same_resolution(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`show --format toml` parses with tomllib, lists omitted None values, and works as a --config file."""
    code, out, _ = run(capsys, "show", "--format", "toml", "--page-size", "4", "--hicache-ratio", "3")
    assert code == 2  # hicache settings need the hierarchical cache: checked before printing
    code, out, _ = run(capsys, "show", "--format", "toml", "--page-size", "4", "--max-running-requests", "7")
    assert code == 0
    data = tomllib.loads(out)
    assert data["schedule"]["page_size"] == 4
    assert data["exec"]["kernel"]["attention_backend"] == "torch_native"
    assert "# unset (None) values are omitted: model.model_config, " in out
    assert "model_config" not in data["model"]
    cfg = tmp_path / "again.toml"
    cfg.write_text(out)
    again = load(env={}, config_file=cfg)
    first = load(["--page-size", "4", "--max-running-requests", "7"], env={})
    assert resolve_once(again.record).values == resolve_once(first.record).values


def test_show_table_groups_by_namespace_with_sources(capsys: pytest.CaptureFixture[str]) -> None:
    """The table has one [namespace] header per leaf namespace and says where each value came from."""
    code, out, _ = run(capsys, "show", "--page-size", "8")
    assert code == 0
    headers = [line for line in out.splitlines() if line.startswith("[")]
    assert headers[:3] == ["[model]", "[device]", "[parallel]"]
    assert headers[-3:] == ["[exec.kernel]", "[exec.graph]", "[exec.mamba]"]
    rows = {line.split()[0]: line.split(None, 3)[1:] for line in out.splitlines() if line.startswith("  ")}
    assert rows["page_size"] == ["8", "restart", "from --page-size"]
    assert rows["port"] == ["30000", "restart", "from defaults"]
    assert rows["chunked_prefill_size"] == ["2048", "step", "from resolution:schedule_defaults (default for cpu)"]
    assert rows["hicache_storage_backend"][1] == "drain"


def test_show_diff_lists_only_changes(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`--diff` keeps only the fields whose resolved value differs from the resolved defaults."""
    monkeypatch.setenv("SGCONF_ADMIN_API_KEY", "adm-secret")
    code, out, _ = run(capsys, "show", "--diff", "--format", "json", "--page-size", "16", "--tp-size", "2")
    assert code == 0
    assert json.loads(out) == {
        "parallel": {"tp_size": 2},
        "schedule": {"page_size": 16},
        "serving": {"admin_api_key": "***"},
    }
    monkeypatch.delenv("SGCONF_ADMIN_API_KEY")
    code, out, _ = run(capsys, "show", "--diff")
    assert (code, out) == (0, "(no differences from the defaults)\n")


def test_show_explain_prints_the_chain_winner_last(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--explain` lists defaults, file, env and CLI in order, the winner marked last."""
    cfg = tmp_path / "app.toml"
    cfg.write_text("[schedule]\npage_size = 2\n")
    monkeypatch.setenv("SGCONF_PAGE_SIZE", "4")
    code, out, _ = run(capsys, "show", "--config", str(cfg), "--page-size", "8", "--explain", "page_size")
    assert code == 0
    assert out.splitlines() == [
        "page_size ($.schedule.page_size, --page-size, env SGCONF_PAGE_SIZE): tokens per KV page; "
        "default 1 (declared null: resolution picks it when no layer sets it)",
        "  1. default    null                     from defaults",
        f"  2. file       2                        from {cfg}",
        "  3. env        4                        from env SGCONF_PAGE_SIZE",
        "  4. cli        8                        from --page-size  <- winner",
    ]


def test_show_explain_includes_the_resolution_step(capsys: pytest.CaptureFixture[str]) -> None:
    """A value resolution decided ends its chain with the `resolution:<step>` entry (JSON form)."""
    code, out, _ = run(
        capsys,
        "show",
        "--explain",
        "speculative_num_draft_tokens",
        "--format",
        "json",
        "--speculative-algorithm",
        "EAGLE",
        "--speculative-num-steps",
        "2",
    )
    assert code == 0
    chain = json.loads(out)["chain"]
    assert [c["layer"] for c in chain] == ["default", "resolution"]
    assert chain[-1] == {
        "layer": "resolution",
        "detail": "spec_defaults (steps * topk + 1)",
        "value": 3,
        "source": "from resolution:spec_defaults (steps * topk + 1)",
    }


def test_show_explain_secret_is_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    """Explaining a secret field never prints its value."""
    code, out, _ = run(capsys, "show", "--api-key", "sk-live-5", "--explain", "api_key")
    assert code == 0
    assert '2. cli        "***"' in out and "sk-live-5" not in out


BAD_INVOCATIONS = [
    (["show", "--page-size", "12"], "  $.schedule.page_size: must be a power of two, got 12 (from --page-size)"),
    (
        ["show", "--page-sise", "16"],
        "  $.page_sise: unknown flag '--page-sise' -- did you mean '--page-size'? (from command line)",
    ),
    (["show", "--explain", "pag_size"], "  $.pag_size: unknown field 'pag_size' -- did you mean 'page_size'?"),
    (["show", "--format", "xml"], "argument --format: invalid choice: 'xml' (choose from 'table', 'json', 'toml')"),
    (
        ["show", "--config", "/nonexistent/app.toml"],
        "  $: config file not found -- check the --config path or SGCONF_CONFIG (from /nonexistent/app.toml)",
    ),
    (["schema", "--indent", "wide"], "argument --indent: invalid int value: 'wide'"),
    (
        ["show", "--nnodes", "2"],
        "  $.parallel.nnodes: --nnodes 2 needs --dist-init-addr -- give the rank-0 host:port (from --nnodes)",
    ),
]


@pytest.mark.parametrize(("argv", "line"), BAD_INVOCATIONS, ids=[" ".join(a) for a, _ in BAD_INVOCATIONS])
def test_bad_input_exits_2_with_message_and_no_traceback(
    capsys: pytest.CaptureFixture[str], argv: list[str], line: str
) -> None:
    """Bad input prints the problem to stderr, nothing to stdout, and exits 2."""
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "")
    assert line in err.splitlines() or any(line in e for e in err.splitlines())
    assert err.startswith("sgconf: ") and "Traceback" not in err


def test_unknown_command_suggests(capsys: pytest.CaptureFixture[str]) -> None:
    """A mistyped command exits 2 with a suggestion."""
    assert run(capsys, "shwo") == (
        2,
        "",
        "sgconf: unknown command 'shwo' -- did you mean 'show'? -- see 'sgconf --help'\n",
    )


def test_no_command_prints_usage_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """Without a command the usage goes to stderr with status 2; --help goes to stdout with 0."""
    code, out, err = run(capsys)
    assert (code, out) == (2, "") and err.startswith("usage: sgconf COMMAND")
    code, out, err = run(capsys, "--help")
    assert (code, err) == (0, "") and "  plan     print the KV memory plan" in out


def test_show_help_groups_flags_by_namespace(capsys: pytest.CaptureFixture[str]) -> None:
    """`show --help` exits 0 and lists each namespace group with help texts, defaults and choices."""
    code, out, _ = run(capsys, "show", "--help")
    assert code == 0
    assert "schedule settings:" in out and "exec.kernel settings:" in out
    assert "--page-size INT" in out
    assert "--enable-dp-attention, --no-enable-dp-attention" in out
    assert "--schedule-policy {fcfs,lpm,random,dfs-weight}" in out
    flat = " ".join(out.split())
    assert "request ordering policy (default: fcfs) [hot]" in flat
    assert "bearer key for inference routes (default: none) [secret]" in flat


def test_delegated_command_missing_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the module behind `plan` cannot be imported, one line is printed and the status is 2."""
    monkeypatch.setitem(sys.modules, "mem_cache.plan_cli", None)
    code, out, err = run(capsys, "plan", "--model-config", "x.json")
    assert (code, out) == (2, "")
    assert len(err.splitlines()) == 1 and err.startswith(
        "sgconf: command 'plan' from entry point mem_cache.plan_cli:main cannot be loaded: ModuleNotFoundError"
    )


def test_delegated_command_gets_the_rest_of_argv(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sgconf serve ...` calls the registered command's main with the arguments after the command name."""
    import types

    seen: list[list[str]] = []
    fake = types.ModuleType("engine.serve")
    fake.main = lambda argv: seen.append(argv) or 7  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "engine.serve", fake)
    assert run(capsys, "serve", "--port", "9")[0] == 7
    assert seen == [["--port", "9"]]


def test_commands_come_from_the_entry_point_group(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A package registers a command in `sgconf.commands`; sgconf offers it without naming the package."""
    import types

    from sgconf import cli
    from sgconf.plugins import Registry

    fake = types.ModuleType("fake_cmds")

    def hello(argv: list[str]) -> int:
        """Say hello to the arguments; returns 0."""
        print("hello", *argv)
        return 0

    fake.hello = hello  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_cmds", fake)

    def registry(group: str | None) -> Registry[cli.Command]:
        found = Registry[cli.Command]("command", entry_points=None)
        found.register("hello", hello)
        return found

    monkeypatch.setattr(cli, "commands", registry)
    assert run(capsys, "hello", "a", "b")[:2] == (0, "hello a b\n")
    assert "  hello    say hello to the arguments" in run(capsys, "--help")[1]
    source = open(cli.__file__).read()
    assert "mem_cache" not in source and "runtime." not in source


def test_config_parser_and_load_from_args_count_only_given_flags(tmp_path: Path) -> None:
    """A subcommand's parser keeps its own options; only typed flags form the CLI layer."""
    parser = config_parser("sgconf plan", "plan memory")
    parser.add_argument("--budget-gb", type=float, default=1.0)
    cfg = tmp_path / "app.json"
    cfg.write_text('{"page_size": 4, "port": 31000}')
    ns = parser.parse_args(["--config", str(cfg), "--port", "32000", "--budget-gb", "2"])
    assert ns.budget_gb == 2.0
    loaded = load_from_args(ns, env={"SGCONF_PAGE_SIZE": "8"})
    assert (loaded.record.page_size, loaded.record.port) == (8, 32000)
    assert [o.layer for o in loaded.provenance["port"]] == ["default", "file", "cli"]
    assert [o.layer for o in loaded.provenance["tp_size"]] == ["default"]
    assert loaded.config_file == str(cfg)


def test_run_cli_turns_config_errors_into_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    """run_cli prints a ConfigError's text to stderr and returns 2; other results pass through."""

    def bad() -> int:
        raise ConfigError("something is off")

    assert run_cli(bad) == 2
    assert capsys.readouterr().err == "sgconf: invalid configuration: 1 problem\n  $: something is off\n"
    assert run_cli(lambda: 0) == 0


def test_every_field_has_a_flag() -> None:
    """The generated parser accepts every declared field's flag."""
    parser = config_parser("sgconf")
    known = {opt for action in parser._actions for opt in action.option_strings}
    assert {info.flag for info in fields().values()} <= known


def console(*argv: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("sgconf")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "sgconf.cli"]
    return subprocess.run([*cmd, *argv], capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})


@pytest.mark.slow  # starts a process: `make test-fast` leaves it out
def test_console_script_bad_flag_value_exits_2_without_traceback() -> None:
    """The installed `sgconf` command exits 2 and prints the problem, not a traceback."""
    proc = console("show", "--page-size", "12", "--tp-size", "x")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (
        "sgconf: invalid configuration: 2 problems\n"
        "  $.parallel.tp_size: expected an integer, got 'x' (from --tp-size)\n"
        "  $.schedule.page_size: must be a power of two, got 12 (from --page-size)\n"
    )


@pytest.mark.slow  # starts a process: `make test-fast` leaves it out
def test_console_script_schema_is_json() -> None:
    """The installed `sgconf schema` prints a JSON document and exits 0."""
    proc = console("schema")
    assert proc.returncode == 0 and proc.stderr == ""
    assert json.loads(proc.stdout)["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    """`sgconf --version` prints the distribution's version on stdout and exits 0."""
    from importlib import metadata

    assert run(capsys, "--version") == (0, f"sgconf {metadata.version('sgconf')}\n", "")
    assert run(capsys, "-V") == (0, f"sgconf {metadata.version('sgconf')}\n", "")


@pytest.mark.slow  # starts a process: `make test-fast` leaves it out
def test_python_dash_m_sgconf_is_the_same_command() -> None:
    """`python -m sgconf` runs the CLI: version, show with an alias, and status 2 for bad input."""
    from importlib import metadata

    def pym(*argv: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SGCONF_")}
        return subprocess.run(
            [sys.executable, "-m", "sgconf", *argv], capture_output=True, text=True, env=env, timeout=120
        )

    version = pym("--version")
    assert (version.returncode, version.stdout) == (0, f"sgconf {metadata.version('sgconf')}\n")
    shown = pym("show", "--tp", "2", "--format", "json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["parallel"]["tp_size"] == 2
    bad = pym("show", "--tp-sise", "2")
    assert bad.returncode == 2 and "did you mean '--tp-size'?" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("command", ["show", "plan"])
def test_show_refuses_a_model_path_as_plan_and_serve_do(capsys: pytest.CaptureFixture[str], command: str) -> None:
    """`show --model /no/such/dir` exits 2 naming the path, like `plan` (and `serve`), instead of printing a config."""
    code, out, err = run(capsys, command, "--model", "/no/such/dir")
    assert (code, out) == (2, "")
    assert "$.model.model_path: no model config at '/no/such/dir' -- pass a directory holding config.json" in err
