"""The built-in serving schema object, declared empty here and filled by `sgconf.serving.namespaces`.

Held in a module of its own so that the serving rules can name flags through it while the
namespaces module, which imports those rules, declares the fields.
"""

from __future__ import annotations

from sgconf.hooks import RuntimeKnobs
from sgconf.schema import Schema

SERVING = Schema(
    "sgconf",
    env_prefix="SGCONF_",
    record_name="ServerArgs",
    description="Every sgconf setting, nested by namespace (exec nests exec.kernel, exec.graph, exec.mamba).",
    knobs=RuntimeKnobs(
        history_limit="overrides_log_limit",
        sync_timeout="config_sync_timeout_s",
        verbosity="log_level",
        log_style="log_format",
    ),
)
# Control variables that share the serving prefix but are not fields (loading does not call them typos).
SERVING.reserved_env |= {"SGCONF_ROLE_NAMESPACES", "SGCONF_ROLE_NAMESPACES_OUT", "SGCONF_HICACHE_FILE_DIR"}

__all__ = ["SERVING"]
