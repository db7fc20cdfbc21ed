"""The minirt schema: three namespaces, the `MINIRT_` prefix, and one accessor per namespace."""

from __future__ import annotations

from typing import Literal

from runtime import accessor
from sgconf import Schema, setting
from sgconf.fields import at_least, interval, positive
from sgconf.sources import SecretsDirSource

SCHEMA = Schema("minirt", env_prefix="MINIRT_", description="Every minirt setting, nested by namespace.")


@SCHEMA.namespace("lora")
class LoraConfig:
    max_loras: int = setting(2, help="adapters resident at once; lowering it evicts", hot=True, checks=[positive()])
    max_lora_rank: int = setting(16, help="largest adapter rank accepted", checks=[positive()])
    preload: list[str] = setting(factory=list, help="adapters loaded at start")


@SCHEMA.namespace("cache")
class CacheConfig:
    capacity_mb: int = setting(512, help="adapter weight cache in MB", checks=[at_least(0)])
    policy: Literal["lru", "fifo"] = setting("lru", help="which resident adapter is evicted first")


@SCHEMA.namespace("api")
class ApiConfig:
    host: str = setting("127.0.0.1", help="HTTP bind address", fingerprint=False)
    port: int = setting(8100, help="HTTP port", checks=[interval(1, 65535)], fingerprint=False)
    token: str | None = setting(None, help="bearer token for admin calls", secret=True)


# secrets mounted one file per field (`<dir>/token`), above the config file and below the environment
SCHEMA.add_source(SecretsDirSource("/run/secrets/minirt", env_var="MINIRT_SECRETS_DIR"), before="env")

# the adapter worker never reads the API settings
SCHEMA.role("adapter_worker", namespaces=["lora", "cache"])
SCHEMA.freeze()

get_lora = accessor(LoraConfig)
get_cache = accessor(CacheConfig)
get_api = accessor(ApiConfig)
