"""runtime: the config core at run time: the published context, accessors, roles, snapshots, testing helpers.

`import runtime` stays light: no torch, FastAPI or uvicorn, and its names load on first
use (`from runtime import get_memory` imports the accessors then), so the pytest plugin
that sgconf installs costs nothing in a project that never reads a config.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runtime.accessors import (
        accessor,
        attention_backends,
        configured_pp_size,
        get_device,
        get_disagg,
        get_exec,
        get_memory,
        get_model,
        get_observability,
        get_parallel,
        get_schedule,
        get_serving,
        get_spec,
        mamba_extra_buffer_enabled,
        mamba_extra_buffer_lazy_enabled,
        max_speculative_num_draft_tokens,
    )
    from runtime.context import (
        RuntimeContext,
        assert_published,
        get_context,
        get_server_args,
        is_published,
        publish,
        reset,
    )
    from runtime.errors import (
        ContextReplacedError,
        NotPublishedError,
        RevertConflict,
        RoleViolation,
        StaleProposalError,
    )
    from runtime.overrides import (
        ConfigEvent,
        FieldChange,
        OverrideProposal,
        OverrideReceipt,
        OverrideRecord,
        Subscription,
    )
    from runtime.roles import ROLE_NAMESPACE_SETS
    from runtime.snapshot import MissingNamespaceError, Snapshot, snapshot_class
    from runtime.testing import override_server_args

_EXPORTS: dict[str, str] = {
    "accessor": "runtime.accessors",
    "attention_backends": "runtime.accessors",
    "configured_pp_size": "runtime.accessors",
    "get_device": "runtime.accessors",
    "get_disagg": "runtime.accessors",
    "get_exec": "runtime.accessors",
    "get_memory": "runtime.accessors",
    "get_model": "runtime.accessors",
    "get_observability": "runtime.accessors",
    "get_parallel": "runtime.accessors",
    "get_schedule": "runtime.accessors",
    "get_serving": "runtime.accessors",
    "get_spec": "runtime.accessors",
    "mamba_extra_buffer_enabled": "runtime.accessors",
    "mamba_extra_buffer_lazy_enabled": "runtime.accessors",
    "max_speculative_num_draft_tokens": "runtime.accessors",
    "RuntimeContext": "runtime.context",
    "assert_published": "runtime.context",
    "get_context": "runtime.context",
    "get_server_args": "runtime.context",
    "is_published": "runtime.context",
    "publish": "runtime.context",
    "reset": "runtime.context",
    "ContextReplacedError": "runtime.errors",
    "NotPublishedError": "runtime.errors",
    "RevertConflict": "runtime.errors",
    "RoleViolation": "runtime.errors",
    "StaleProposalError": "runtime.errors",
    "ConfigEvent": "runtime.overrides",
    "FieldChange": "runtime.overrides",
    "OverrideProposal": "runtime.overrides",
    "OverrideReceipt": "runtime.overrides",
    "OverrideRecord": "runtime.overrides",
    "Subscription": "runtime.overrides",
    "ROLE_NAMESPACE_SETS": "runtime.roles",
    "MissingNamespaceError": "runtime.snapshot",
    "Snapshot": "runtime.snapshot",
    "snapshot_class": "runtime.snapshot",
    "override_server_args": "runtime.testing",
}

__all__ = [
    "ConfigEvent",
    "ContextReplacedError",
    "FieldChange",
    "MissingNamespaceError",
    "NotPublishedError",
    "OverrideProposal",
    "OverrideReceipt",
    "OverrideRecord",
    "ROLE_NAMESPACE_SETS",
    "RevertConflict",
    "RoleViolation",
    "RuntimeContext",
    "Snapshot",
    "StaleProposalError",
    "Subscription",
    "accessor",
    "assert_published",
    "attention_backends",
    "configured_pp_size",
    "get_context",
    "get_device",
    "get_disagg",
    "get_exec",
    "get_memory",
    "get_model",
    "get_observability",
    "get_parallel",
    "get_schedule",
    "get_server_args",
    "get_serving",
    "get_spec",
    "is_published",
    "mamba_extra_buffer_enabled",
    "mamba_extra_buffer_lazy_enabled",
    "max_speculative_num_draft_tokens",
    "override_server_args",
    "publish",
    "reset",
    "snapshot_class",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'runtime' has no attribute {name!r}")
    # not cached here: the module in sys.modules stays the one source (a test harness may re-import it)
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
