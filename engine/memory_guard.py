"""The memory guard: weights plus planned KV pools against the memory this process may use.

It runs after the pools are planned and before anything is allocated, so a model that
cannot fit is one refusal naming both numbers and the flags that would fit, instead of
an out-of-memory kill halfway through building it. What the process may use is the
static share (`mem_fraction_static`) of the device's free memory: on cuda what the
driver reports free, on a CPU what the kernel reports available, lowered by a cgroup
limit when the process runs under one.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import torch

from engine.errors import MemoryGuardError  # declared there; re-exported for existing imports

GIB = 1 << 30
SMALLER_DTYPES = {"float32": ("bfloat16", "float16"), "float16": (), "bfloat16": ()}


def _gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def _cgroup_left() -> int | None:
    """Bytes left under the cgroup v2 memory limit of this process, None without one."""
    root = Path("/sys/fs/cgroup")
    try:
        limit = (root / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(int(limit) - int((root / "memory.current").read_text()), 0)
    except (OSError, ValueError):
        return None


def _cpu_available() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
                break
        else:
            raise ValueError("no MemAvailable")
    except (OSError, ValueError):
        import os

        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    left = _cgroup_left()
    return available if left is None else min(available, left)


def usable_bytes(device: str, mem_fraction_static: float) -> int:
    """The memory this process may fill with weights and KV pools on `device`."""
    if device.startswith("cuda") and torch.cuda.is_available():
        free, _total = torch.cuda.mem_get_info(torch.device(device))
    else:
        free = _cpu_available()
    return int(free * mem_fraction_static)


@attrs.frozen(slots=True)
class MemoryNeed:
    """What a model asks for: its weights in each dtype it could run in, and its planned KV pools."""

    dtype: str
    weights_by_dtype: dict[str, int]
    kv_bytes: int
    kv_tokens: int
    context_length: int
    device: str

    @property
    def weights_bytes(self) -> int:
        return self.weights_by_dtype[self.dtype]

    @property
    def total(self) -> int:
        return self.weights_bytes + self.kv_bytes


def fixes(need: MemoryNeed, usable: int) -> list[str]:
    """The flags that would make `need` fit in `usable` bytes, most effective first."""
    out = []
    for smaller in SMALLER_DTYPES.get(need.dtype, ()):
        weights = need.weights_by_dtype[smaller]
        if weights + need.kv_bytes * weights // max(need.weights_bytes, 1) <= usable:
            out.append(f"--dtype {smaller} ({_gib(weights)} of weights)")
            break
    room = usable - need.weights_bytes
    if room > 0 and need.kv_tokens > 0:
        per_token = need.kv_bytes / need.kv_tokens
        tokens = int(room / per_token)
        if tokens >= 1:
            out.append(f"--max-total-tokens {tokens}")
            if tokens < need.context_length:
                out.append(f"--context-length {tokens}")
            else:
                out.append(f"--max-running-requests {max(tokens // need.context_length, 1)}")
    return out


def check_fits(need: MemoryNeed, usable: int) -> None:
    """Refuse `need` when it exceeds `usable`, naming both numbers and the flags that would fit."""
    if need.total <= usable:
        return
    msg = (
        f"the model needs {_gib(need.weights_bytes)} of {need.dtype} weights plus {_gib(need.kv_bytes)} of KV pools "
        f"({need.kv_tokens} tokens), {_gib(need.total)} in all, but this process may use {_gib(usable)} on {need.device}"
    )
    found = fixes(need, usable)
    if found:
        msg += " -- try " + " or ".join(found)
    else:
        msg += " -- the weights alone exceed it: serve a smaller model, or run where more memory is free"
    raise MemoryGuardError(msg, needed_bytes=need.total, usable_bytes=usable)


__all__ = ["MemoryGuardError", "MemoryNeed", "check_fits", "fixes", "usable_bytes"]
