"""`sgconf plan`: table and JSON output, example names, and bad input without a traceback."""

from __future__ import annotations

import json

import pytest

from mem_cache.plan_cli import main, parse_size
from runtime import is_published


def test_json_plan_for_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    """An example name is accepted and the JSON plan fits the given budget; nothing stays published."""
    assert main(["--model-config", "small-hybrid-5to1", "--available-memory", "16MiB", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == "small-hybrid-5to1" and out["configurator"] == "hybrid_swa"
    assert out["budget_bytes"] == 16 << 20 and 0.99 * (16 << 20) <= out["total_bytes"] <= 16 << 20
    assert out["swa_max_total_num_tokens"] == int(out["full_max_total_num_tokens"] * 0.8)
    assert not is_published()


def test_table_plan(capsys: pytest.CaptureFixture[str]) -> None:
    """The table names the configurator, per-token bytes and the total against the budget."""
    assert main(["--model-config", "small-dense", "--available-memory", "8MiB", "--page-size", "16"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["configurator", "default"]
    assert lines[4].split()[:4] == ["tensor", "parallel", "1", "rank,"]
    assert lines[5].split() == ["bytes", "per", "token", "full", "1,024", "swa", "0", "draft", "0"]
    assert lines[-2].split() == ["bytes", "total", "8,377,360", "of", "8,388,608", "budget", "(99.87%)"]
    assert lines[-1].split() == ["budget", "from", "kv_cache_memory_bytes,", "from", "--available-memory"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--available-memory", "lots"], "'--available-memory' must be a positive size like 24GiB"),
        (
            ["--model-config", "smal-dense"],
            "'smal-dense' is neither a file nor a shipped model -- did you mean 'small-dense'?",
        ),
        (["--model-config", "small-dense", "--available-memory", "1KiB"], "not enough memory for the KV cache"),
    ],
)
def test_bad_input_exits_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Bad input prints one clear message on stderr and exits 2, without a traceback."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["--available-memory", "1KiB"],
            "$.available_memory: the KV cache needs at least 260003088 bytes, the budget is 1024 bytes "
            "(from --available-memory) -- raise --available-memory to at least 260003088 bytes (0.25GiB)",
        ),
        (
            ["--kv-cache-memory-bytes", "1024"],
            "$.kv_cache_memory_bytes: the KV cache needs at least 260003088 bytes, the budget is 1024 bytes "
            "(from --kv-cache-memory-bytes) -- raise --kv-cache-memory-bytes to at least 260003088 bytes (0.25GiB)",
        ),
        (
            [],
            "$.kv_cache_memory_bytes: the KV cache needs at least 260003088 bytes, the budget is 67108864 bytes "
            "(from --kv-cache-memory-bytes) -- raise --kv-cache-memory-bytes to at least 260003088 bytes (0.25GiB)",
        ),
    ],
)
def test_not_enough_memory_names_the_setting_that_sets_the_budget(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A budget too small asks for more of the flag it was typed as; on cpu that is the budget setting, never a fraction."""
    base = [
        "--model-config",
        "small-dense",
        "--device",
        "cpu",
        "--context-length",
        "1000000",
        "--max-running-requests",
        "64",
    ]
    assert main([*base, *argv]) == 2
    assert capsys.readouterr().err.splitlines() == ["sgconf: not enough memory for the KV cache", f"  {line}"]


def test_parse_size() -> None:
    """Binary and decimal units and plain byte counts are understood."""
    assert (parse_size("24GiB"), parse_size("1.5GB"), parse_size("512")) == (24 << 30, 1_500_000_000, 512)


@pytest.mark.parametrize(
    ("argv", "lines"),
    [
        (
            ["--device", "cpu", "--gpu-memory-utilization", "0.5"],
            [
                "sgconf: resolution failed",
                "  $.schedule.mem_fraction_static: --mem-fraction-static 0.5 and --kv-cache-memory-bytes 67108864 both size "
                "the KV cache; on cpu no device memory is measured, so --kv-cache-memory-bytes is the budget there (64MiB "
                "unless set) -- set one of them (from --gpu-memory-utilization; from resolution:schedule_defaults; from --device)",
            ],
        ),
        (
            ["--available-memory", "1GiB", "--kv-cache-memory-bytes", "1024"],
            [
                "sgconf: invalid configuration: 1 problem",
                "  $: '--available-memory' and '--kv-cache-memory-bytes' both set the KV budget -- give one",
            ],
        ),
    ],
)
def test_a_budget_set_twice_is_refused(argv: list[str], lines: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Two settings that would both size the KV cache are refused, naming both, rather than one silently winning."""
    assert main(argv) == 2
    assert capsys.readouterr().err.splitlines() == lines
