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

import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

from runtime.errors import NotPublishedError
from sgconf import derived as _derived
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
from sgconf.schema import PATH_ATTR

if TYPE_CHECKING:
    from runtime.snapshot import Snapshot

T = TypeVar("T")


class _Unpublished:
    """Stands in for the view before publish: any read raises with the fix."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # protocol probes (copy, pickle, torch.compile) are not config reads
            raise AttributeError(name)
        msg = (
            f"no runtime config is published: get_{name}() was read before publish() -- call "
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


def _missing(view: Any, path: str) -> Exception:
    from runtime.snapshot import missing_namespace

    schema = getattr(view, "schema", None)
    if schema is None:
        return AttributeError(path)
    return missing_namespace(schema, path.partition(".")[0])


@overload
def accessor(namespace: type[T], *, name: str | None = None) -> Callable[[], T]: ...


@overload
def accessor(namespace: str, *, name: str | None = None) -> Callable[[], Any]: ...


def accessor(namespace: type[Any] | str, *, name: str | None = None) -> Callable[[], Any]:
    """A zero-argument accessor for a namespace: `get_lora = accessor(LoraConfig)`; `get_lora().max_loras`.

    Pass the namespace class (typed: mypy knows `get_lora()` is a `LoraConfig`) or its path
    (`"lora"`, `"exec.kernel"`). The accessor reads the live view of whatever schema is
    published, overrides included, in one global read and one attribute read per path
    level, exactly like a hand-written `def get_lora(): return _view.lora`. Raises
    TypeError for a class no schema declared and ValueError for a malformed path.
    """
    if isinstance(namespace, str):
        path = namespace
    else:
        found = getattr(namespace, PATH_ATTR, None)
        if not isinstance(found, str):
            msg = (
                f"{getattr(namespace, '__name__', namespace)!r} is not a namespace class of any schema "
                "-- declare it with @schema.namespace(...) first, or pass the namespace path"
            )
            raise TypeError(msg)
        path = found
    parts = path.split(".")
    if not path or not all(p.isidentifier() and not p.startswith("_") for p in parts):
        raise ValueError(f"namespace path {path!r} must be dotted identifiers, like 'lora' or 'exec.kernel'")
    fname = name or "get_" + "_".join(parts)
    if not fname.isidentifier():
        raise ValueError(f"accessor name {fname!r} must be an identifier")
    # compiled against this module's globals: the same bytecode as a hand-written accessor, so
    # reads cost the same and torch.compile traces through them without a graph break. The
    # handler costs nothing until a schema without this namespace is published (and no
    # `__getattr__` on snapshots slows every read down).
    source = (
        f"def {fname}():\n"
        f"    try:\n"
        f"        return _view.{path}\n"
        f"    except AttributeError:\n"
        f"        raise _missing(_view, {path!r}) from None\n"
    )
    code = compile(source, f"<accessor {path}>", "exec")
    fn_code = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    fn = types.FunctionType(fn_code, globals(), fname)
    fn.__qualname__ = fname
    fn.__module__ = __name__
    fn.__doc__ = f"The live {path!r} bag of the published config (overrides included)."
    return fn


get_model = accessor(ModelConfig)
get_device = accessor(DeviceConfig)
get_parallel = accessor(ParallelConfig)
get_memory = accessor(MemoryConfig)
get_schedule = accessor(ScheduleConfig)
get_spec = accessor(SpecConfig)
get_disagg = accessor(DisaggConfig)
get_serving = accessor(ServingConfig)
get_observability = accessor(ObservabilityConfig)
get_exec = accessor(ExecConfig)


# Derived accessors: computed from the bags, so they follow overrides. Given a snapshot
# they read that snapshot; without one, the live view.


def max_speculative_num_draft_tokens(snapshot: Snapshot | None = None) -> int:
    """Draft-token bound for buffers: max of the active count and the publish-time capacity (0 without spec)."""
    return _derived.max_speculative_num_draft_tokens(_view if snapshot is None else snapshot)


def mamba_extra_buffer_enabled(snapshot: Snapshot | None = None) -> bool:
    """Whether mamba keeps an extra state buffer (strategy extra_buffer or extra_buffer_lazy)."""
    return _derived.mamba_extra_buffer_enabled(_view if snapshot is None else snapshot)


def mamba_extra_buffer_lazy_enabled(snapshot: Snapshot | None = None) -> bool:
    """Whether the extra mamba buffer is filled lazily (strategy extra_buffer_lazy)."""
    return _derived.mamba_extra_buffer_lazy_enabled(_view if snapshot is None else snapshot)


def configured_pp_size(snapshot: Snapshot | None = None) -> int:
    """The configured pipeline-parallel size."""
    return _derived.configured_pp_size(_view if snapshot is None else snapshot)


def attention_backends(snapshot: Snapshot | None = None) -> tuple[str, str]:
    """`(prefill, decode)` attention backends, each falling back to `attention_backend`."""
    return _derived.attention_backends(_view if snapshot is None else snapshot)


__all__ = [
    "accessor",
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
