"""Derived values of the serving schema: computed from the bags, so they follow overrides.

Each takes a view with the bags as attributes (a snapshot, or a role-guarded view of one)
and reads that view only, so a derived value reads the same generation as its inputs.
`SERVING_DERIVED` declares each as a `Derived` with the bags it reads: the schema checks
them when it freezes, and a copy of the serving schema that leaves one out drops the
values that need it.
"""

from __future__ import annotations

from typing import Any

from sgconf.hooks import Derived


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
    return view.parallel.pp_size  # type: ignore[no-any-return]


def attention_backends(view: Any) -> tuple[str, str]:
    """`(prefill, decode)` backend names; each falls back to `attention_backend`."""
    kernel = view.exec.kernel
    base = kernel.attention_backend
    return (kernel.prefill_attention_backend or base, kernel.decode_attention_backend or base)


SERVING_DERIVED: tuple[Derived, ...] = (
    Derived("max_speculative_num_draft_tokens", ("spec",), max_speculative_num_draft_tokens),
    Derived("mamba_extra_buffer_enabled", ("exec.mamba",), mamba_extra_buffer_enabled),
    Derived("mamba_extra_buffer_lazy_enabled", ("exec.mamba",), mamba_extra_buffer_lazy_enabled),
    Derived("configured_pp_size", ("parallel",), configured_pp_size),
    Derived("attention_backends", ("exec.kernel",), attention_backends),
)
