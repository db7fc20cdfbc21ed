"""`Snapshot`: every config bag at one generation, plus the values derived from them.

A snapshot is immutable. Code that reads several values for one decision (pool sizing,
a forward pass) takes one snapshot and reads everything from it, so an override landing
in between cannot hand it half of the old config and half of the new.
"""

from __future__ import annotations

from typing import Any

import attrs

from runtime import fingerprint as _fingerprint
from sgconf.errors import DeclarationError
from sgconf.namespaces import (
    DeviceConfig,
    DisaggConfig,
    ExecConfig,
    MemoryConfig,
    ModelConfig,
    ObservabilityConfig,
    ParallelConfig,
    ScheduleConfig,
    ServingConfig,
    SpecConfig,
)
from sgconf.record import bags_to_flat
from sgconf.registry import top_level_namespaces

# The top-level bags a snapshot holds, in declaration order; checked against the registry below.
BAG_NAMES: tuple[str, ...] = (
    "model",
    "device",
    "parallel",
    "memory",
    "schedule",
    "spec",
    "disagg",
    "serving",
    "observability",
    "exec",
)

if tuple(top_level_namespaces()) != BAG_NAMES:  # pragma: no cover - guards a declaration change
    raise DeclarationError(
        f"runtime.snapshot.BAG_NAMES {BAG_NAMES} differs from the declared namespaces "
        f"{tuple(top_level_namespaces())} -- add the new namespace to Snapshot"
    )


class DerivedValues:
    """The derived accessors as methods (`snap.attention_backends()`), read from this object's own bags.

    Shared by `Snapshot` and the role-guarded view, so both answer the same names.
    """

    __slots__ = ()

    def max_speculative_num_draft_tokens(self) -> int:
        return max_speculative_num_draft_tokens(self)

    def mamba_extra_buffer_enabled(self) -> bool:
        return mamba_extra_buffer_enabled(self)

    def mamba_extra_buffer_lazy_enabled(self) -> bool:
        return mamba_extra_buffer_lazy_enabled(self)

    def configured_pp_size(self) -> int:
        return configured_pp_size(self)

    def attention_backends(self) -> tuple[str, str]:
        return attention_backends(self)


@attrs.frozen(slots=True, weakref_slot=False)
class Snapshot(DerivedValues):
    """All bags at one `generation`; attribute names match the accessors (`snap.schedule` ~ `get_schedule()`)."""

    generation: int
    model: ModelConfig
    device: DeviceConfig
    parallel: ParallelConfig
    memory: MemoryConfig
    schedule: ScheduleConfig
    spec: SpecConfig
    disagg: DisaggConfig
    serving: ServingConfig
    observability: ObservabilityConfig
    exec: ExecConfig

    @classmethod
    def from_bags(cls, generation: int, bags: dict[str, Any]) -> Snapshot:
        return cls(generation, **{name: bags[name] for name in BAG_NAMES})

    def bags(self) -> dict[str, Any]:
        """The top-level bags by namespace name (a fresh dict; the bags themselves are immutable)."""
        return {name: getattr(self, name) for name in BAG_NAMES}

    def flat(self) -> dict[str, Any]:
        """Every leaf as `{field: value}`."""
        return bags_to_flat(self.bags())

    def fingerprint(self) -> str:
        """Stable hex hash of the counted leaves; see `fingerprint_of`."""
        return fingerprint_of(self.flat())


# Derived values. Each takes anything with the snapshot's bag attributes (a Snapshot or a
# role-guarded view of one), so a derived value reads the same generation as its inputs.


def max_speculative_num_draft_tokens(view: Any) -> int:
    """The larger of the active draft-token count and the capacity kept at publish; 0 without speculation.

    Buffers sized at publish use the capacity; an override may lower the active count but a
    consumer must never size below what is already allocated, hence the max.
    """
    spec = view.spec
    return max(spec.speculative_num_draft_tokens or 0, spec.max_speculative_num_draft_tokens or 0)


def mamba_extra_buffer_enabled(view: Any) -> bool:
    """Whether mamba state keeps an extra buffer for prefix reuse (eager or lazy)."""
    return view.exec.mamba.mamba_radix_cache_strategy in ("extra_buffer", "extra_buffer_lazy")


def mamba_extra_buffer_lazy_enabled(view: Any) -> bool:
    """Whether the extra mamba buffer is filled lazily."""
    return view.exec.mamba.mamba_radix_cache_strategy == "extra_buffer_lazy"


def configured_pp_size(view: Any) -> int:
    """The pipeline-parallel size the server was configured with."""
    return view.parallel.pp_size


def attention_backends(view: Any) -> tuple[str, str]:
    """`(prefill, decode)` backend names; each falls back to `attention_backend`."""
    kernel = view.exec.kernel
    base = kernel.attention_backend
    return (kernel.prefill_attention_backend or base, kernel.decode_attention_backend or base)


def fingerprint_of(flat: dict[str, Any]) -> str:
    """SHA-256 over the counted leaves in canonical form; see `runtime.fingerprint`."""
    return _fingerprint.fingerprint_of(flat)
