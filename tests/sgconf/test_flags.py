"""Command-line flags: aliases declared on the field, help order and topics, and defaults said once and truly."""

from __future__ import annotations

import functools as _functools

import pytest

from sgconf import SERVING as _SERVING
from sgconf import DeclarationError, Schema, load, setting
from sgconf.flags import config_parser as _config_parser
from sgconf.serving import field_info, fields
from tests.support import run_sgconf as run

pytestmark = pytest.mark.usefixtures("no_sgconf_env")

config_parser = _functools.partial(_config_parser, schema=_SERVING)

ALIASES = [
    ("--model", "model_path", "small-dense"),
    ("--tp", "tp_size", "2"),
    ("--tensor-parallel-size", "tp_size", "2"),
    ("--dp", "dp_size", "2"),
    ("--data-parallel-size", "dp_size", "2"),
    ("--pp", "pp_size", "2"),
    ("--pipeline-parallel-size", "pp_size", "2"),
    ("--ep", "ep_size", "2"),
    ("--expert-parallel-size", "ep_size", "2"),
    ("--max-model-len", "context_length", "512"),
    ("--seed", "random_seed", "7"),
    ("--speculative-draft-model", "speculative_draft_model_path", "/models/draft"),
    ("--gpu-memory-utilization", "mem_fraction_static", "0.5"),
    ("--max-num-seqs", "max_running_requests", "8"),
    ("--max-num-batched-tokens", "chunked_prefill_size", "512"),
]


@pytest.mark.parametrize(("alias", "name", "raw"), ALIASES)
def test_alias_sets_its_field_and_provenance_names_it(alias: str, name: str, raw: str) -> None:
    """Each alias sets its field like the flag does, and provenance says which spelling was typed."""
    extra = ["--speculative-algorithm", "STANDALONE"] if name.startswith("speculative") else []
    loaded = load([alias, raw, *extra], env={})
    assert str(getattr(loaded.record, name)) == raw
    assert loaded.winner(name).describe() == f"from {alias}"
    assert alias in field_info(name).flags


def test_the_flag_itself_is_named_in_provenance() -> None:
    """The declared flag still reads as itself, and `--no-` for a boolean switched off."""
    loaded = load(["--tp-size", "2", "--no-disable-radix-cache"], env={})
    assert loaded.winner("tp_size").describe() == "from --tp-size"
    assert loaded.winner("disable_radix_cache").describe() == "from --no-disable-radix-cache"


@pytest.mark.parametrize("command", ["show", "plan", "serve"])
def test_aliases_show_in_every_commands_help(capsys: pytest.CaptureFixture[str], command: str) -> None:
    """`--help` of show, plan and serve prints each flag with its aliases and one metavar."""
    code, out, err = run(capsys, command, "--help")
    assert (code, err) == (0, "")
    assert "--tp-size, --tp, --tensor-parallel-size INT" in out
    assert "--dp-size, --dp, --data-parallel-size INT" in out
    assert "--model-path, --model STR" in out
    assert "--mem-fraction-static, --gpu-memory-utilization FLOAT" in out
    assert "--max-running-requests, --max-num-seqs INT" in out
    assert "--chunked-prefill-size, --max-num-batched-tokens INT" in out
    assert "--enable-prefix-caching, --no-enable-prefix-caching" in out


def test_explain_names_the_aliases(capsys: pytest.CaptureFixture[str]) -> None:
    """`--explain` lists a field's aliases next to its flag and credits the alias that was typed."""
    code, out, _ = run(capsys, "show", "--tp", "2", "--explain", "tp_size")
    assert code == 0
    assert out.splitlines() == [
        "tp_size ($.parallel.tp_size, --tp-size (aliases --tp, --tensor-parallel-size), env SGCONF_TP_SIZE): "
        "tensor parallel size",
        "  1. default    1                        from defaults",
        "  2. cli        2                        from --tp  <- winner",
    ]


def test_unknown_flag_suggests_by_distance_and_prefix(capsys: pytest.CaptureFixture[str]) -> None:
    """`--tp-sise` suggests `--tp-size` (not `--dp-size` nor `--dtype`)."""
    code, out, err = run(capsys, "show", "--tp-sise", "2")
    assert (code, out) == (2, "")
    assert (
        err.splitlines()[1] == "  $.tp_sise: unknown flag '--tp-sise' -- did you mean '--tp-size'? (from command line)"
    )


@pytest.mark.parametrize(
    ("command", "own"),
    [
        ("show", ["--format", "--explain", "--diff"]),
        ("plan", ["--available-memory", "--format"]),
        ("serve", ["--config"]),
    ],
)
def test_help_starts_with_the_commands_own_options(
    capsys: pytest.CaptureFixture[str], command: str, own: list[str]
) -> None:
    """A command's own options print before the first namespace group, and every namespace follows in order."""
    code, out, _ = run(capsys, command, "--help")
    assert code == 0
    first_group = out.index("\nmodel settings:")
    for opt in ["--help", "--config", *own]:
        assert out.index("  -h, --help" if opt == "--help" else f"  {opt}") < first_group
    titles = [line[: -len(" settings:")] for line in out.splitlines() if line.endswith(" settings:")]
    namespaces = "model device parallel memory schedule spec disagg serving observability"
    assert titles == [*namespaces.split(), "exec.kernel", "exec.graph", "exec.mamba"]


def test_help_topic_namespace_shows_that_group_only(capsys: pytest.CaptureFixture[str]) -> None:
    """`--help=memory` prints only the memory group; `--help=exec` the three exec groups."""
    code, out, _ = run(capsys, "show", "--help=memory")
    assert code == 0
    titles = [line for line in out.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert titles == ["memory settings:"]
    assert "--hicache-ratio FLOAT" in out and "--format" not in out
    code, out, _ = run(capsys, "show", "--help", "exec")
    assert [line for line in out.splitlines() if line.endswith(" settings:")] == [
        "exec.kernel settings:",
        "exec.graph settings:",
        "exec.mamba settings:",
    ]


def test_help_topic_word_finds_flags_and_aliases(capsys: pytest.CaptureFixture[str]) -> None:
    """`--help=parallel-size` lists every setting whose flag or alias holds the word."""
    code, out, _ = run(capsys, "show", "--help=parallel-size")
    assert code == 0
    assert "settings matching 'parallel-size':" in out
    flags = [line.split()[0].rstrip(",") for line in out.splitlines() if line.startswith("  --")]
    assert flags == ["--tp-size", "--pp-size", "--dp-size", "--ep-size"]


def test_unknown_help_topic_is_a_usage_error_with_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown topic exits 2 with the namespaces to choose from and a did-you-mean."""
    code, out, err = run(capsys, "show", "--help=memroy")
    assert (code, out) == (2, "")
    assert "no help topic 'memroy' -- did you mean 'memory'? -- use a namespace (model, device," in err


def test_defaults_are_said_once() -> None:
    """A field decided later says its default in its help text only; a plain default is appended once."""
    help_of = {a.dest: a.help for a in config_parser("x")._actions}
    assert help_of["page_size"] == "tokens per KV page; default 1"
    assert help_of["random_seed"] == "seed for weights and sampling; default: 0"
    assert help_of["tp_size"] == "tensor parallel size (default: 1)"
    assert help_of["cuda_graph_max_bs"] == "largest batch captured in a CUDA graph (default: none)"
    assert not [
        name
        for name, text in help_of.items()
        if text and "default" in text.replace("(default:", "", 1) and "(default:" in text
    ]


def test_a_command_states_its_own_defaults() -> None:
    """`shown_defaults` replaces the declared default in that command's help."""
    parser = config_parser("x", shown_defaults={"enable_hierarchical_cache": "true here"})
    help_of = {a.dest: a.help for a in parser._actions}
    assert help_of["enable_hierarchical_cache"] == "enable the HiCache host tier (default: true here)"


def test_duplicate_alias_is_a_declaration_error() -> None:
    """An alias already used by another field fails at declaration, naming both fields."""
    schema = Schema("dup")

    @schema.namespace("a")
    class A:
        tp_size: int = setting(1, help="x", aliases=["--tp"])

    with pytest.raises(
        DeclarationError, match="flag '--tp' is declared for both 'tp_size' and 'top_k' of schema 'dup'"
    ):

        @schema.namespace("b")
        class B:
            top_k: int = setting(1, help="y", aliases=["--tp"])


@pytest.mark.parametrize("alias", ["-tp", "--TP", "--config", "--help", "tp"])
def test_malformed_or_reserved_alias_is_a_declaration_error(alias: str) -> None:
    """An alias must be a lowercase two-dash flag that no command reserves."""
    schema = Schema("bad")
    with pytest.raises(DeclarationError, match=f"flag '{alias}' of field 'tp_size' must look like '--tp'"):

        @schema.namespace("a")
        class A:
            tp_size: int = setting(1, help="x", aliases=[alias])


def test_every_alias_is_unique_across_the_serving_schema() -> None:
    """No flag or alias of the serving schema names two fields."""
    every = [flag for info in fields().values() for flag in info.flags]
    assert len(every) == len(set(every))


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        (["--enable-prefix-caching"], "disable_radix_cache", False),
        (["--no-enable-prefix-caching"], "disable_radix_cache", True),
        (["--disable-log-requests"], "log_requests", False),
        (["--no-disable-log-requests"], "log_requests", True),
    ],
)
def test_an_inverse_alias_sets_the_opposite_and_provenance_names_it(argv: list[str], field: str, value: bool) -> None:
    """vLLM's `--enable-prefix-caching` is `--no-disable-radix-cache`, credited to the spelling typed."""
    loaded = load(argv, env={})
    assert getattr(loaded.record, field) is value
    assert loaded.winner(field).describe() == f"from {argv[0]}"


def test_inverse_aliases_show_in_help_and_explain(capsys: pytest.CaptureFixture[str]) -> None:
    """`--help` prints the inverse pair with what it means, and `--explain` lists it as an inverse alias."""
    code, out, _ = run(capsys, "show", "--help=memory")
    assert code == 0
    assert "--enable-prefix-caching, --no-enable-prefix-caching" in out
    assert "--enable-prefix-caching is --no-disable-radix-cache" in " ".join(out.split())
    code, out, _ = run(capsys, "show", "--enable-prefix-caching", "--explain", "disable_radix_cache")
    assert out.splitlines()[0].startswith(
        "disable_radix_cache ($.memory.disable_radix_cache, --disable-radix-cache (aliases --enable-prefix-caching (inverse)), "
    )
    assert out.splitlines()[-1].endswith("from --enable-prefix-caching  <- winner")


def test_an_inverse_alias_needs_a_boolean_field() -> None:
    """Declaring an inverse alias on a non-boolean field is refused at declaration."""
    s = Schema("inv")
    with pytest.raises(
        DeclarationError, match="field 'size' declares inverse aliases, which only a boolean field can have"
    ):

        @s.namespace("a")
        class A:
            size: int = setting(1, help="x", inverse_aliases=["--small"])


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["--quantization", "fp8"],
            "$.quantization: '--quantization' is not supported here: weights are not quantized by this runtime; "
            "the KV cache can be stored narrower -- use --kv-cache-dtype fp8_e4m3 (from command line)",
        ),
        (
            ["--trust-remote-code"],
            "$.trust_remote_code: '--trust-remote-code' is not supported here: no model code is ever loaded "
            "from a checkpoint: models run on the built-in implementation -- drop the flag (from command line)",
        ),
        (
            ["--enable-metrics"],
            "$.enable_metrics: '--enable-metrics' is not supported here: metrics are always on, as Prometheus "
            "text at GET /metrics -- drop the flag (from command line)",
        ),
        (
            ["--no-enable-chunked-prefill"],
            "$.no_enable_chunked_prefill: '--no-enable-chunked-prefill' is not supported here: "
            "prefill is always chunked here -- size the chunks with --chunked-prefill-size (or "
            "--max-num-batched-tokens) (from command line)",
        ),
    ],
)
@pytest.mark.parametrize("command", ["show", "plan", "serve"])
def test_flags_of_missing_features_are_refused_with_the_reason(
    capsys: pytest.CaptureFixture[str], command: str, argv: list[str], line: str
) -> None:
    """A flag of a feature this runtime lacks is refused with one line that says so, in every command, before any work."""
    code, _, err = run(capsys, command, *argv, "--page-size", "4")
    assert code == 2
    assert err.splitlines() == ["sgconf: invalid command line", f"  {line}"]


def test_a_copied_schema_keeps_the_refused_flags() -> None:
    """A runtime that starts from the serving schema refuses the same foreign flags."""
    import sgconf

    mini = sgconf.SERVING.copy("minirefuse", without=["spec"])
    assert mini.refused_flags == sgconf.SERVING.refused_flags
