"""runtime: the config core at run time: the published context, accessors, roles, testing helpers.

`import runtime` stays light: no torch, FastAPI or uvicorn (the serving engine that
uses it lives in the top-level `engine` package).
"""

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
