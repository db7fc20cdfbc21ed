"""The capacity planned at start-up, and the hot overrides it bounds.

Some hot fields size what the pools were built for: `max_running_requests` (request
rows), `chunked_prefill_size` (the SWA chunk cap and prefill buffers) and the
speculative draft settings (the draft-token headroom of every request row). They may
change while the engine runs, but only within what was planned: lower, and back up to
the planned value, never above it. Above it is refused with the planned value and the
launch flag that would plan more.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from engine.errors import CapacityExceeded
from sgconf.errors import Problem
from sgconf.serving import field_info


@attrs.frozen(slots=True)
class PlannedCapacity:
    """The planned maximum of each bounded hot field (None: the field is not in use here)."""

    max_running_requests: int
    chunked_prefill_size: int
    speculative_num_steps: int | None = None
    speculative_num_draft_tokens: int | None = None
    speculative_eagle_topk: int | None = None

    def as_dict(self) -> dict[str, int | None]:
        return attrs.asdict(self)

    def problems(self, values: Mapping[str, Any], source: str) -> list[Problem]:
        """One problem per value above its planned maximum."""
        out = []
        for name, cap in self.as_dict().items():
            if name not in values or values[name] is None:
                continue
            info = field_info(name)
            value = values[name]
            if cap is None:
                msg = (
                    f"'{name}' cannot change here: no speculative algorithm was planned at start-up "
                    f"(got {value!r}) -- restart with --speculative-algorithm and {info.flag} {value}"
                )
                out.append(Problem(info.path, msg, f"from override {source}"))
            elif value > cap:
                msg = (
                    f"'{name}' may be at most {cap}, the capacity planned at start-up (got {value!r}) "
                    f"-- lower it, or restart with {info.flag} {value}"
                )
                out.append(Problem(info.path, msg, f"from override {source}"))
        return out

    def check(self, values: Mapping[str, Any], source: str) -> None:
        """Raise CapacityExceeded, a ConfigError (nothing changes), when any value exceeds its planned maximum."""
        problems = self.problems(values, source)
        if problems:
            raise CapacityExceeded(problems, header=f"override from {source!r} rejected, nothing changed")


__all__ = ["PlannedCapacity"]
