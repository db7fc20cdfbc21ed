"""Attention backends by name, and the one factory that picks them from the config.

`create_attention_backend(runner)` reads the (prefill, decode) backend names through the
`attention_backends()` accessor, so an override of the backend fields is honoured at the
next backend construction. A name that is not registered, or whose backend cannot run
on this machine, is a ConfigError that lists the names that would work.
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

from attention.base import Attend, AttentionBackend, ModeRouter
from attention.errors import AttentionBackendUnavailable
from attention.forward_batch import ForwardBatch, ForwardMode
from attention.runner import ModelRunnerLike
from attention.torch_native import TorchNativeBackend
from runtime import attention_backends, get_exec
from sgconf.errors import Problem
from sgconf.serving.plugins import ATTENTION_BACKENDS

B = TypeVar("B", bound=type[AttentionBackend])


def register_backend(cls: B) -> B:
    """Register a backend class under its `name` (usable as a class decorator).

    The registry is the serving schema's (`sgconf.serving.plugins.ATTENTION_BACKENDS`), so
    the name can be chosen with `--attention-backend`. Raises DeclarationError naming
    both classes when another class already holds the name.
    """
    ATTENTION_BACKENDS.register(cls.name, cls)
    return cls


def registered_backends() -> tuple[str, ...]:
    """Every registered name, sorted, whether or not it can run here."""
    return ATTENTION_BACKENDS.names()


def available_backends() -> tuple[str, ...]:
    """The registered names whose backend can run on this machine, sorted."""
    return tuple(
        name for name in ATTENTION_BACKENDS.names() if ATTENTION_BACKENDS.get(name).unavailable_reason() is None
    )


def backend_class(name: str, *, role: str = "attention", field: str | None = None) -> type[AttentionBackend]:
    """The class registered as `name`; raises AttentionBackendUnavailable listing what would work.

    `role` ("prefill", "decode") shapes the message; `field` is the exec.kernel field the
    name was read from (default: the role's own field), so the error points at the
    setting the user actually wrote.
    """
    cls = ATTENTION_BACKENDS.get(name) if name in ATTENTION_BACKENDS else None
    usable = ", ".join(available_backends()) or "none"
    if field is None:
        field = "attention_backend" if role == "attention" else f"{role}_attention_backend"
    path = f"$.exec.kernel.{field}"
    if cls is None:
        msg = f"unknown attention backend '{name}' for {role} -- choose one of: {usable}"
        raise AttentionBackendUnavailable([Problem(path, msg)], header="attention backend not available")
    reason = cls.unavailable_reason()
    if reason is not None:
        msg = f"attention backend '{name}' for {role} cannot run here: {reason} -- choose one of: {usable}"
        raise AttentionBackendUnavailable([Problem(path, msg)], header="attention backend not available")
    return cast("type[AttentionBackend]", cls)  # what `register_backend` admits


class HybridAttnBackend(ModeRouter):
    """Extend batches go to the prefill backend, decode batches to the decode backend."""

    def __init__(self, prefill: AttentionBackend, decode: AttentionBackend) -> None:
        self.prefill_backend = prefill
        self.decode_backend = decode
        self.name = f"{prefill.name}+{decode.name}"
        # a phase's own entry point is its side's, bound once: the sides never change
        self.forward_extend: Attend = prefill.forward_extend
        self.forward_decode: Attend = decode.forward_decode

    def _target(self, batch: ForwardBatch) -> AttentionBackend:
        return self.decode_backend if batch.mode is ForwardMode.DECODE else self.prefill_backend

    def init_forward_metadata(self, batch: ForwardBatch) -> Any:
        return self._target(batch).init_forward_metadata(batch)

    def _route(self, batch: ForwardBatch) -> Attend:
        return self._target(batch).forward


BackendLike = AttentionBackend | HybridAttnBackend


def create_attention_backend(
    runner: ModelRunnerLike, *, snapshot: Any = None, names: tuple[str, str] | None = None
) -> BackendLike:
    """Build the backend(s) for `runner` from `attention_backends()` (or explicit `names`).

    `snapshot` (from `get_context().snapshot()`) lets a caller that plans from one
    snapshot pick the backends from that same generation. One backend when prefill and
    decode name the same one, else a HybridAttnBackend. Raises
    AttentionBackendUnavailable for an unknown or unavailable name (both checked before
    anything is built).
    """
    if names is not None:
        prefill_name, decode_name = names
        prefill_field, decode_field = "prefill_attention_backend", "decode_attention_backend"
    else:
        prefill_name, decode_name = attention_backends(snapshot)
        kernel = (get_exec() if snapshot is None else snapshot.exec).kernel
        # A phase without its own setting falls back to attention_backend: blame that field.
        prefill_field = "prefill_attention_backend" if kernel.prefill_attention_backend else "attention_backend"
        decode_field = "decode_attention_backend" if kernel.decode_attention_backend else "attention_backend"
    prefill_cls = backend_class(prefill_name, role="prefill", field=prefill_field)
    decode_cls = backend_class(decode_name, role="decode", field=decode_field)
    if prefill_cls is decode_cls:
        return prefill_cls(runner)
    return HybridAttnBackend(prefill_cls(runner), decode_cls(runner))


register_backend(TorchNativeBackend)
