"""A schema of its own, bound at module level, for records that cross a process boundary."""

from __future__ import annotations

from sgconf import Schema, setting

SCHEMA = Schema("pickledrt", env_prefix="PICKLEDRT_")


@SCHEMA.namespace("lora")
class LoraConfig:
    max_loras: int = setting(4, help="adapters resident at once", hot=True)
    lora_paths: list[str] = setting(factory=list, help="adapter directories")
    options: dict[str, int] = setting(factory=dict, help="per-adapter options")


@SCHEMA.namespace("api")
class ApiConfig:
    port: int = setting(8000, help="HTTP port")
    token: str | None = setting(None, help="bearer token", secret=True)


SCHEMA.freeze()
