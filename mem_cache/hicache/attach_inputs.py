"""The values an attach (and the controller) take: the policy choices and the backend's extra config."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from mem_cache.hicache.errors import StorageAttachError
from mem_cache.hicache.storage import EXTRA_CONFIG_FIELD

WRITE_POLICIES = ("write_through", "write_back", "write_through_selective")
PREFETCH_POLICIES = ("best_effort", "wait_complete", "timeout")
WRITE_POLICY_FIELD = "hicache_write_policy"
PREFETCH_POLICY_FIELD = "hicache_storage_prefetch_policy"


def check_choice(field: str, value: object, choices: tuple[str, ...], error: type[Exception]) -> None:
    if value in choices:
        return
    msg = f"'{field}' must be one of {', '.join(choices)} (got {value!r}) -- pick one of those"
    if error is StorageAttachError:
        raise StorageAttachError(msg, field=field, value=value)
    raise error(msg)


def parse_extra_config(extra_config: Mapping[str, Any] | str | None) -> Mapping[str, Any]:
    if extra_config is None:
        return {}
    if isinstance(extra_config, str):
        try:
            parsed = json.loads(extra_config) if extra_config.strip() else {}
        except json.JSONDecodeError as exc:
            msg = f'\'{EXTRA_CONFIG_FIELD}\' is not valid JSON ({exc.msg} at position {exc.pos}) -- pass an object like {{"dir": "/path"}}'
            raise StorageAttachError(msg, field=EXTRA_CONFIG_FIELD, value=extra_config) from exc
        extra_config = parsed
    if not isinstance(extra_config, Mapping):
        msg = f'\'{EXTRA_CONFIG_FIELD}\' must be a JSON object (got {extra_config!r}) -- pass an object like {{"dir": "/path"}}'
        raise StorageAttachError(msg, field=EXTRA_CONFIG_FIELD, value=extra_config)
    return extra_config
