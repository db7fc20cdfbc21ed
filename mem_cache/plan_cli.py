"""`sgconf plan`: print the KV memory plan for a model and a configuration, allocating nothing.

`--model-config` (and `--model-path`) take a path to an HF-style config.json or the name of
a shipped model (`sgconf/serving/builtin_models/`, listed by `mem_cache.examples`). The config is
published (role "scheduler") and planned exactly as `sgconf serve` plans it: one
snapshot, the same configurator and the same budget (`kv_budget`), so the numbers
printed are the pools a server started with the same flags builds.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from mem_cache.examples import example_names, example_path
from mem_cache.kv_cache_configurator import KVCacheConfigurator
from mem_cache.model_shape import model_shape_from_config
from mem_cache.pool_configurator import MemoryPoolConfig
from sgconf.cli import config_parser, load_from_args, run_cli
from sgconf.errors import UsageError
from sgconf.flags import TYPED_ATTR
from sgconf.serving import SERVING
from sgconf.serving.models import load_model_config

PROG = "sgconf plan"
UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
    "t": 1000**4,
    "tb": 1000**4,
}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """Bytes from `24GiB`, `512MiB`, `1.5GB` or a plain byte count; UsageError otherwise."""
    m = _SIZE.match(text)
    unit = m.group(2).lower() if m else None
    if m is None or unit not in UNITS or float(m.group(1)) <= 0:
        raise UsageError(
            f"'--available-memory' must be a positive size like 24GiB, 512MiB or 8000000000 (got {text!r})"
        )
    return int(float(m.group(1)) * UNITS[unit])


def plan_parser() -> argparse.ArgumentParser:
    parser = config_parser(
        PROG,
        "Print the KV memory plan: pool configurator, per-token bytes, pool sizes and bytes vs the budget.",
        schema=SERVING,
    )
    out = parser.add_argument_group("plan")
    out.add_argument(
        "--available-memory",
        metavar="SIZE",
        default=None,
        help="kv_cache_memory_bytes as a size, e.g. 24GiB: the bytes the KV cache may use (default: as for "
        "--kv-cache-memory-bytes, which `sgconf serve` takes too)",
    )
    out.add_argument("--format", choices=("table", "json"), default="table", help="output format (default: table)")
    parser.add_argument_group("examples for --model-config").description = ", ".join(example_names())
    return parser


def _model_name(value: str) -> str:
    """How the plan names its model: a shipped model by its name, a file by its stem."""
    return value if example_path(value) is not None else Path(value).stem


def _plan(argv: Sequence[str]) -> int:
    from runtime import get_context, is_published, publish, reset

    ns = plan_parser().parse_args(list(argv))
    flag = None
    if ns.available_memory is not None:
        if getattr(ns, "kv_cache_memory_bytes", None) is not None:
            raise UsageError("'--available-memory' and '--kv-cache-memory-bytes' both set the KV budget -- give one")
        # the size is the kv_cache_memory_bytes setting, typed as --available-memory
        ns.kv_cache_memory_bytes = str(parse_size(ns.available_memory))
        flag = "--available-memory"
        setattr(ns, TYPED_ATTR, {**(getattr(ns, TYPED_ATTR, None) or {}), "kv_cache_memory_bytes": flag})
    loaded = load_from_args(ns, schema=SERVING)
    record = loaded.record
    cfg = load_model_config(record.model_path, record.model_config)
    name = _model_name(record.model_config) if record.model_config else record.model_path
    shape = model_shape_from_config(cfg, name=name)
    was_published = is_published()
    publish(record, role="scheduler", model=cfg)
    try:
        plan = KVCacheConfigurator(shape, snapshot=get_context().snapshot(), budget_flag=flag).plan()
        if plan.budget_source == "kv_cache_memory_bytes":  # say where the setting came from
            origin = get_context().explain("kv_cache_memory_bytes")[-1].describe()
            plan = attrs.evolve(plan, budget_source=f"kv_cache_memory_bytes, {origin}")
    finally:
        if not was_published:
            reset()
    if ns.format == "json":
        print(json.dumps({"model": name, **plan.describe()}, indent=2))
    else:
        print(render_table(name, plan))
    return 0


def _n(v: int) -> str:
    return f"{v:,}"


def _tp_row(plan: MemoryPoolConfig) -> str:
    total, per = plan.kv_heads_total, plan.kv_heads_per_rank
    if plan.tp_size == 1:
        return f"1 rank, all {total} KV heads"
    how = "replicated" if plan.tp_size > (total or 0) else "split"
    return f"{plan.tp_size} ranks, {per} of {total} KV heads per rank ({how}); sizes below are per rank"


def render_table(name: str, plan: MemoryPoolConfig) -> str:
    """The plan as aligned `label  value` lines."""
    d: dict[str, Any] = plan.describe()
    per, layers = d["bytes_per_token"], d["draft_layers"]
    rows = [
        ("model", name),
        ("configurator", plan.configurator),
        ("kv cache dtype", plan.kv_cache_dtype),
        ("page size", str(plan.page_size)),
        ("tensor parallel", _tp_row(plan)),
        ("bytes per token", f"full {_n(per['full'])}  swa {_n(per['swa'])}  draft {_n(per['draft'])}"),
        (
            "draft layers",
            f"full {layers['full']}  swa {layers['swa']}  swa full-capacity {layers['swa_full_capacity']}",
        ),
        ("max total tokens", _n(plan.max_total_num_tokens) + ("  (capped by max_total_tokens)" if plan.capped else "")),
        ("full pool tokens", _n(plan.full_max_total_num_tokens)),
        ("swa pool tokens", _n(plan.swa_max_total_num_tokens)),
        ("max requests", _n(plan.max_num_reqs)),
        ("req-to-token shape", f"{plan.req_to_token_shape[0]} x {plan.req_to_token_shape[1]}"),
    ]
    rows += [(f"bytes {k}", _n(v)) for k, v in d["pool_bytes"].items()]
    share = 100.0 * plan.total_bytes / plan.budget_bytes if plan.budget_bytes else 0.0
    rows.append(("bytes total", f"{_n(plan.total_bytes)} of {_n(plan.budget_bytes)} budget ({share:.2f}%)"))
    rows.append(("budget from", plan.budget_source or "given"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the KV memory plan for a model and config; returns the exit status (2 on bad input, message on stderr).

    Registered as the `plan` command of the `sgconf` CLI (entry-point group `sgconf.commands`).
    """
    import sys

    return run_cli(lambda: _plan(sys.argv[1:] if argv is None else argv))


__all__ = ["main", "parse_size", "plan_parser", "render_table"]
