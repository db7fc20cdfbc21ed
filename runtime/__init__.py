"""runtime: the config core at run time: the published context, accessors, roles, snapshots, testing helpers.

`import runtime` stays light: no torch, FastAPI or uvicorn, and its names load on first
use (`from runtime import get_memory` imports the accessors then), so the pytest plugin
that sgconf installs costs nothing in a project that never reads a config. Each public
name is stated once, in `_EXPORTS` by the module that defines it; `__all__` is derived.
The serving schema's accessors come from `runtime.serving`, the one module that binds them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the same names, for type checkers (each module's `__all__`)
    from runtime.accessors import *  # noqa: F403
    from runtime.context import *  # noqa: F403
    from runtime.errors import *  # noqa: F403
    from runtime.overrides import *  # noqa: F403
    from runtime.record_view import *  # noqa: F403
    from runtime.serving import *  # noqa: F403
    from runtime.snapshot import *  # noqa: F403

_EXPORTS: dict[str, tuple[str, ...]] = {
    "runtime.accessors": ("accessor",),
    "runtime.context": (
        "RuntimeContext",
        "assert_published",
        "create_context",
        "get_context",
        "get_server_args",
        "is_published",
        "publish",
        "reset",
        "use_context",
    ),
    "runtime.errors": ("ContextReplacedError", "NotPublishedError", "RevertConflict", "RoleViolation", "StaleProposalError"),
    "runtime.overrides": ("ConfigEvent", "FieldChange", "OverrideProposal", "OverrideReceipt", "OverrideRecord", "Subscription"),
    "runtime.record_view": ("RecordView",),
    "runtime.serving": (
        "ROLE_NAMESPACE_SETS",
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
        "override_server_args",
    ),
    "runtime.snapshot": ("MissingNamespaceError", "Snapshot", "snapshot_class"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'runtime' has no attribute {name!r}")
    # not cached here: the module in sys.modules stays the one source (a test harness may re-import it)
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
