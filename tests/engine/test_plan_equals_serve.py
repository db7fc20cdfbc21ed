"""`sgconf plan` predicts `sgconf serve`: for every shipped model and a table of flag sets, the same pools."""

from __future__ import annotations

import json

import pytest

from engine.engine import Engine
from engine.serve import load_serve_record
from mem_cache.errors import ModelShapeError
from mem_cache.plan_cli import main as plan_main
from runtime import is_published
from sgconf.errors import ConfigError
from sgconf.serving.models import builtin_model_names as example_names

pytestmark = pytest.mark.slow  # starts processes or servers: `make test-fast` leaves it out

# the shipped models `serve` runs (random weights); the others hold attention sizes only, or
# (small-hybrid-mtp) a second head geometry for SWA layers, which the embedded model lacks
RUNNABLE = ["tiny", "small-dense", "small-hybrid-5to1", "small-all-swa"]
FLAG_SETS = [
    (),
    ("--page-size", "16", "--max-num-seqs", "8"),
    ("--kv-cache-memory-bytes", "8000000", "--context-length", "256"),
    ("--disable-radix-cache", "--max-total-tokens", "700"),
    ("--speculative-algorithm", "EAGLE", "--gpu-memory-utilization", "0.5", "--device", "cuda"),  # refused on cpu
    ("--speculative-algorithm", "EAGLE", "--max-running-requests", "4"),
]


def _plan(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict | None:
    code = plan_main([*argv, "--format", "json"])
    out, err = capsys.readouterr()
    return json.loads(out) if code == 0 else {"refused": err}


def test_every_shipped_model_is_in_the_table() -> None:
    """The table covers each model `serve` can run; the rest are refused by serve (below)."""
    assert set(RUNNABLE) <= set(example_names())


@pytest.mark.parametrize("flags", FLAG_SETS, ids=lambda f: " ".join(f) or "defaults")
@pytest.mark.parametrize("model", RUNNABLE)
def test_plan_numbers_are_what_serve_builds(
    capsys: pytest.CaptureFixture[str], model: str, flags: tuple[str, ...]
) -> None:
    """Pool bytes, tokens and max running requests of `plan` equal those of the engine `serve` starts."""
    argv = ["--model", model, *flags]
    plan = _plan(capsys, argv)
    try:
        record = load_serve_record(argv, env={})
        engine = Engine(record)
    except ConfigError as exc:  # what serve refuses, plan cannot have planned (cuda on a cpu-only machine)
        assert plan is not None and "refused" in plan, f"serve refused what plan planned: {exc}"
        return
    try:
        assert plan is not None and "refused" not in plan, plan
        mem = engine.memory
        built = {
            "max_total_num_tokens": mem.max_total_tokens,
            "max_num_reqs": engine.scheduler.limits.max_running_requests,
            "req_to_token_shape": list(mem.req_to_token_pool.req_to_token.shape),
            "total_bytes": mem.describe()["total_bytes"],  # every tensor the pools hold, as /server_info reports it
            "budget_bytes": mem.plan.budget_bytes,
        }
        assert {k: plan[k] for k in built} == built
        assert mem.describe().get("swa_tokens", 0) == plan["swa_max_total_num_tokens"]
        assert engine.capacity.max_running_requests == plan["max_num_reqs"]  # what a hot override may rise back to
    finally:
        engine.shutdown()


@pytest.mark.parametrize("model", sorted(set(example_names()) - set(RUNNABLE)))
def test_serve_refuses_the_published_layouts_plan_sizes(capsys: pytest.CaptureFixture[str], model: str) -> None:
    """A model `serve` cannot run is planned, and `serve` refuses it naming what is missing, leaving nothing published."""
    assert "refused" not in (_plan(capsys, ["--model", model, "--available-memory", "24GiB"]) or {})
    with pytest.raises(ModelShapeError, match="cannot be run"):
        Engine(load_serve_record(["--model", model], env={}))
    assert not is_published()
