"""Fixtures every test folder shares; helpers that are not fixtures live in `tests.support`."""

from __future__ import annotations

import os

import pytest

from sgconf import Schema, setting
from sgconf.fields import positive


def make_myrt_schema() -> Schema:
    """An adopter's schema: three namespaces of its own, a MYRT_ prefix, no built-in field, one role."""
    schema = Schema("myrt", env_prefix="MYRT_")

    @schema.namespace("lora")
    class LoraConfig:
        max_loras: int = setting(4, help="adapters resident at once", hot=True, checks=[positive()])
        lora_paths: list[str] = setting(factory=list, help="adapter directories")

    @schema.namespace("cache")
    class CacheConfig:
        page_size: int = setting(16, help="tokens per cache page")
        policy: str = setting("lru", help="eviction policy")

    @schema.namespace("api")
    class ApiConfig:
        port: int = setting(8000, help="HTTP port")
        token: str | None = setting(None, help="bearer token", secret=True)

    schema.role("lora_worker", namespaces=["lora"])
    return schema.freeze()


@pytest.fixture
def no_sgconf_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hide the developer's SGCONF_* variables, for tests of what the CLI resolves by itself."""
    for var in [v for v in os.environ if v.startswith("SGCONF_")]:
        monkeypatch.delenv(var)


@pytest.fixture
def myrt() -> Schema:
    """A fresh `make_myrt_schema()` per test."""
    return make_myrt_schema()
