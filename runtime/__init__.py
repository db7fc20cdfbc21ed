"""runtime: the config core at run time: the published context, accessors, roles, snapshots, testing helpers.

`import runtime` stays light: no torch, FastAPI or uvicorn, and its names load on first
use (`from runtime import get_memory` imports the accessors then), so the pytest plugin
that sgconf installs costs nothing in a project that never reads a config. Each public
name is stated once, in `_EXPORTS` by the module that defines it; `__all__` is derived.
The serving schema's accessors come from `runtime.serving`, the one module that binds them.
"""

from __future__ import annotations

import importlib
import importlib.util
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
        "withdraw",
    ),
    "runtime.errors": (
        "ContextReplacedError",
        "ForeignNamespaceError",
        "NotPublishedError",
        "RevertConflict",
        "RoleViolation",
        "StaleProposalError",
    ),
    "runtime.overrides": (
        "ConfigEvent",
        "FieldChange",
        "OverrideProposal",
        "OverrideReceipt",
        "OverrideRecord",
        "Owner",
        "Subscription",
    ),
    "runtime.record_view": ("RecordView",),
    "runtime.snapshot": ("MissingNamespaceError", "Snapshot", "snapshot_class"),
}
# Every name of this module's `__all__` is also a name of the runtime facade; loaded on first use.
_SERVING = "runtime.serving"
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}


def _serving_names() -> tuple[str, ...]:
    return tuple(importlib.import_module(_SERVING).__all__)


def __getattr__(name: str) -> Any:
    if name == "__all__":  # derived, and computed only when asked: `import runtime` stays light
        return sorted({*_MODULE_OF, *_serving_names()})
    module = _MODULE_OF.get(name)
    if module is None:
        # `from runtime import process` asks here first: a submodule is the import system's to load
        if name.startswith("__") or importlib.util.find_spec(f"{__name__}.{name}") is not None:
            raise AttributeError(f"module 'runtime' has no attribute {name!r}")
        if name not in _serving_names():
            raise AttributeError(f"module 'runtime' has no attribute {name!r}")
        module = _SERVING
    # not cached here: the module in sys.modules stays the one source (a test harness may re-import it)
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULE_OF, *_serving_names()})
