"""What the embedded engine cannot honour on this machine, refused before anything is built.

The engine is one process on one device. A setting it would otherwise accept and then
ignore (pipeline or expert parallelism, a device this torch cannot reach) is refused
here, naming the flag and why, so an operator never runs a server that silently differs
from its command line. `sgconf serve` calls this right after loading, before binding a
port; the engine calls it again before it plans its pools.
"""

from __future__ import annotations

from typing import Any

from sgconf.errors import ConfigError, Problem
from sgconf.registry import field_info


def _one_rank(name: str, value: int, what: str, planned: str) -> Problem:
    info = field_info(name)
    msg = (
        f"the embedded engine runs one rank, so it cannot {what} over {name} {value}{planned} "
        f"-- start it with {info.flag} 1"
    )
    return Problem(info.path, msg)


def unhonoured(snap: Any) -> list[Problem]:
    """One problem per setting of `snap` (a snapshot, or bags by attribute) this engine would not honour here."""
    parallel, device = snap.parallel, snap.device
    problems = []
    if int(parallel.tp_size) > 1:
        problems.append(_one_rank(
            "tp_size", int(parallel.tp_size), "split attention heads", f" (a plan for it is `sgconf plan --tp-size {parallel.tp_size}`)"
        ))
    if int(parallel.pp_size) > 1:
        problems.append(_one_rank("pp_size", int(parallel.pp_size), "pipeline layers", ""))
    if int(parallel.ep_size) > 1:
        problems.append(_one_rank("ep_size", int(parallel.ep_size), "spread experts", ""))
    if str(device.device) == "cuda":
        import torch

        if not torch.cuda.is_available():
            why = "this torch is built without CUDA" if torch.version.cuda is None else "no CUDA device is visible"
            info = field_info("device")
            msg = f"device 'cuda' was asked for, and {why} -- use {info.flag} cpu (or auto)"
            problems.append(Problem(info.path, msg))
    return problems


def refuse_unhonoured(snap: Any) -> None:
    """Raise ConfigError listing every setting this engine would not honour here; nothing is built."""
    problems = unhonoured(snap)
    if problems:
        raise ConfigError(problems, header="settings the embedded engine cannot honour on this machine")


__all__ = ["refuse_unhonoured", "unhonoured"]
