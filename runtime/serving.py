"""The serving schema's accessors and test helper: the runtime names users of the built-in schema type.

One accessor per namespace, made with `accessor(...)` like any runtime's own, and the
derived values of `sgconf.serving.derived`, each reading the live view (or the snapshot it
is given), so they follow overrides. `override_server_args` is `runtime.testing`'s with
the serving schema as the fallback when nothing is published. This is the only module of
`runtime` that names the serving schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TextIO

from runtime import logs as _logs
from runtime import process
from runtime import testing as _testing
from runtime.accessors import accessor
from sgconf.serving import SERVING
from sgconf.serving import derived as _derived
from sgconf.serving import namespaces as _ns

if TYPE_CHECKING:
    from runtime.snapshot import Snapshot

get_model = accessor(_ns.ModelConfig)
get_device = accessor(_ns.DeviceConfig)
get_parallel = accessor(_ns.ParallelConfig)
get_memory = accessor(_ns.MemoryConfig)
get_schedule = accessor(_ns.ScheduleConfig)
get_spec = accessor(_ns.SpecConfig)
get_disagg = accessor(_ns.DisaggConfig)
get_serving = accessor(_ns.ServingConfig)
get_observability = accessor(_ns.ObservabilityConfig)
get_exec = accessor(_ns.ExecConfig)

# The serving schema's role sets: a live read-only view.
ROLE_NAMESPACE_SETS: Mapping[str, frozenset[str]] = SERVING.roles()


def _view(snapshot: Snapshot | None) -> Any:
    return process._view if snapshot is None else snapshot


def max_speculative_num_draft_tokens(snapshot: Snapshot | None = None) -> int:
    """Draft-token bound for buffers: max of the active count and the publish-time capacity (0 without spec)."""
    return _derived.max_speculative_num_draft_tokens(_view(snapshot))


def mamba_extra_buffer_enabled(snapshot: Snapshot | None = None) -> bool:
    """Whether mamba keeps an extra state buffer (strategy extra_buffer or extra_buffer_lazy)."""
    return _derived.mamba_extra_buffer_enabled(_view(snapshot))


def mamba_extra_buffer_lazy_enabled(snapshot: Snapshot | None = None) -> bool:
    """Whether the extra mamba buffer is filled lazily (strategy extra_buffer_lazy)."""
    return _derived.mamba_extra_buffer_lazy_enabled(_view(snapshot))


def configured_pp_size(snapshot: Snapshot | None = None) -> int:
    """The configured pipeline-parallel size."""
    return _derived.configured_pp_size(_view(snapshot))


def attention_backends(snapshot: Snapshot | None = None) -> tuple[str, str]:
    """`(prefill, decode)` attention backends, each falling back to `attention_backend`."""
    return _derived.attention_backends(_view(snapshot))


def configure_logs(stream: TextIO | None = None) -> None:
    """Configure the server's logs from the published serving config, `log_level` read live at every event."""
    _logs.configure_from_config(stream, live=lambda: get_observability().log_level)


def override_server_args(
    values: Mapping[str, Any] | None = None,
    /,
    *,
    role: str = "test",
    model: Mapping[str, Any] | None = None,
    schema: Any = None,
    **fields: Any,
) -> _testing.ServerArgsOverride:
    """`runtime.testing.override_server_args` with the serving schema when none is given and none is published."""
    return _testing.override_server_args(values, role=role, model=model, schema=schema, fallback=SERVING, **fields)


__all__ = [
    "ROLE_NAMESPACE_SETS",
    "attention_backends",
    "configure_logs",
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
    "override_server_args",
]
