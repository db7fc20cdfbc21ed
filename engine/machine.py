"""What the embedded engine cannot honour on this machine, refused before anything is built.

The engine is one process on one device; it spans nodes only as a replica group
(`--dp-size` a multiple of `--nnodes`). A setting it would otherwise accept and then
ignore (pipeline or expert parallelism, a device this torch cannot reach) is refused
here, naming the flag and why, so an operator never runs a server that silently differs
from its command line. `sgconf serve` calls this right after loading, before binding a
port; the engine checks again (`checked_launch`) before it publishes.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

from mem_cache.model_shape import ModelShape
from sgconf.errors import ConfigError, Problem
from sgconf.serving import field_info


def unhonoured(snap: Any, sources: Mapping[str, str] | None = None) -> list[Problem]:
    """One problem per setting of `snap` (a snapshot, or bags by attribute) this engine would not honour here.

    `sources` says where each value came from (`{"pp_size": "from --pp"}`), for the messages.
    """
    sources = sources or {}

    def _one_rank(name: str, value: int, what: str, planned: str) -> Problem:
        info = field_info(name)
        msg = (
            f"the embedded engine runs one rank, so it cannot {what} over {name} {value}{planned} "
            f"-- start it with {info.flag} 1"
        )
        return Problem(info.path, msg, sources.get(name))

    parallel, device = snap.parallel, snap.device
    problems = []
    if int(parallel.tp_size) > 1:
        problems.append(
            _one_rank(
                "tp_size",
                int(parallel.tp_size),
                "split attention heads",
                f" (a plan for it is `sgconf plan --tp-size {parallel.tp_size}`)",
            )
        )
    if int(parallel.pp_size) > 1:
        problems.append(_one_rank("pp_size", int(parallel.pp_size), "pipeline layers", ""))
    if int(parallel.ep_size) > 1:
        problems.append(_one_rank("ep_size", int(parallel.ep_size), "spread experts", ""))
    nnodes, dp_size = int(parallel.nnodes), int(parallel.dp_size)
    if nnodes > 1 and dp_size % nnodes:
        info = field_info("nnodes")
        msg = (
            "the embedded engine spans nodes only as one group of replicas, as many on each node,"
            f" so --dp-size {dp_size} cannot be split over {info.flag} {nnodes}"
            f" -- give --dp-size a multiple of {nnodes} (the replicas of all nodes together)"
        )
        problems.append(Problem(info.path, msg, sources.get("nnodes") or sources.get("dp_size")))
    if str(device.device) == "cuda":
        import torch

        if not torch.cuda.is_available():
            why = "this torch is built without CUDA" if torch.version.cuda is None else "no CUDA device is visible"
            info = field_info("device")
            msg = f"device 'cuda' was asked for, and {why} -- use {info.flag} cpu (or auto)"
            problems.append(Problem(info.path, msg, sources.get("device")))
    return problems


def refuse_unhonoured(snap: Any, sources: Mapping[str, str] | None = None) -> None:
    """Raise ConfigError listing every setting this engine would not honour here; nothing is built."""
    problems = unhonoured(snap, sources)
    if problems:
        raise ConfigError(problems, header="settings the embedded engine cannot honour on this machine")


def checked_launch(record: Any, model_config: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], ModelShape]:
    """The model config and runnable shape of `record`, or the refusal, before anything is published or built.

    A server that cannot start must leave no published context behind, so every check
    that needs only the record and the model runs here first.
    """
    from engine.model import runnable_shape
    from sgconf.resolution import resolve_once
    from sgconf.serving.models import load_model_config

    launch = SimpleNamespace(**resolve_once(record, model_config).bags())
    refuse_unhonoured(launch)
    if model_config is None:
        model_config = load_model_config(launch.model.model_path, launch.model.model_config)
    config = dict(model_config)
    return config, runnable_shape(config, name="target")


__all__ = ["checked_launch", "refuse_unhonoured", "unhonoured"]
