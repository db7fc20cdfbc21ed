"""Named accessors: the only way business code reads configuration.

`get_schedule().page_size` returns the value of the live context, overrides included.
Each accessor is one global read and one attribute read, with no lock: a commit swaps
the whole view in one reference assignment, so a reader sees either the old bags or
the new ones, never a mix.

Reading several values for one decision
    Take one snapshot (`snap = get_context().snapshot()`) and read every value from
    it, or pass it to the derived accessors (`max_speculative_num_draft_tokens(snap)`).
    Two accessor calls may straddle an override and see two generations.

Reading inside a forward pass (and under `torch.compile`)
    Accessors may be called inside compiled code: dynamo traces through them without a
    graph break and guards on the values it reads, so after an override the next call
    recompiles and sees the new value. Never copy a config value into a module
    attribute, a closure or a default argument at construction time: that copy is
    the stale constant an override cannot reach. Read through the accessor (or the
    snapshot handed to the step) at the point of use. Values that size allocated
    buffers are not hot; they cannot change under a running forward. Role mode
    `enforce` compiles cleanly too; `record` writes a file on a pair's first read, so
    run audits eagerly.

Before any `publish()`, every accessor raises `NotPublishedError` saying how to publish.
"""

from __future__ import annotations

from typing import Any

from runtime import snapshot as _snapshot
from runtime.errors import NotPublishedError
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


class _Unpublished:
    """Stands in for the view before publish: any read raises with the fix."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # protocol probes (copy, pickle, torch.compile) are not config reads
            raise AttributeError(name)
        what = f"get_{name}()" if name in _snapshot.BAG_NAMES else f"{name}"
        msg = (
            f"no runtime config is published: {what} was read before publish() -- call "
            "runtime.publish(record, role=...) at startup, or use runtime.override_server_args(...) "
            "or the server_args pytest fixture in tests"
        )
        raise NotPublishedError(msg)

    def __repr__(self) -> str:
        return "<unpublished>"


UNPUBLISHED: Any = _Unpublished()

# The live view (a Snapshot, or a role-guarded view of one). Only runtime.context assigns it.
_view: Any = UNPUBLISHED


def _set_view(view: Any) -> None:
    global _view
    _view = view


def get_model() -> ModelConfig:
    return _view.model


def get_device() -> DeviceConfig:
    return _view.device


def get_parallel() -> ParallelConfig:
    return _view.parallel


def get_memory() -> MemoryConfig:
    return _view.memory


def get_schedule() -> ScheduleConfig:
    return _view.schedule


def get_spec() -> SpecConfig:
    return _view.spec


def get_disagg() -> DisaggConfig:
    return _view.disagg


def get_serving() -> ServingConfig:
    return _view.serving


def get_observability() -> ObservabilityConfig:
    return _view.observability


def get_exec() -> ExecConfig:
    return _view.exec


# Derived accessors: computed from the bags, so they follow overrides. Given a snapshot
# they read that snapshot; without one, the live view.


def max_speculative_num_draft_tokens(snapshot: _snapshot.Snapshot | None = None) -> int:
    """Draft-token bound for buffers: max of the active count and the publish-time capacity (0 without spec)."""
    return _snapshot.max_speculative_num_draft_tokens(_view if snapshot is None else snapshot)


def mamba_extra_buffer_enabled(snapshot: _snapshot.Snapshot | None = None) -> bool:
    """Whether mamba keeps an extra state buffer (strategy extra_buffer or extra_buffer_lazy)."""
    return _snapshot.mamba_extra_buffer_enabled(_view if snapshot is None else snapshot)


def mamba_extra_buffer_lazy_enabled(snapshot: _snapshot.Snapshot | None = None) -> bool:
    """Whether the extra mamba buffer is filled lazily (strategy extra_buffer_lazy)."""
    return _snapshot.mamba_extra_buffer_lazy_enabled(_view if snapshot is None else snapshot)


def configured_pp_size(snapshot: _snapshot.Snapshot | None = None) -> int:
    """The configured pipeline-parallel size."""
    return _snapshot.configured_pp_size(_view if snapshot is None else snapshot)


def attention_backends(snapshot: _snapshot.Snapshot | None = None) -> tuple[str, str]:
    """`(prefill, decode)` attention backends, each falling back to `attention_backend`."""
    return _snapshot.attention_backends(_view if snapshot is None else snapshot)


__all__ = [
    "attention_backends",
    "configured_pp_size",
    "get_device",
    "get_disagg",
    "get_exec",
    "get_memory",
    "get_model",
    "get_observability",
    "get_parallel",
    "get_schedule",
    "get_serving",
    "get_spec",
    "mamba_extra_buffer_enabled",
    "mamba_extra_buffer_lazy_enabled",
    "max_speculative_num_draft_tokens",
]
