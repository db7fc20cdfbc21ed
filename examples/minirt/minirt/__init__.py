"""minirt: a small LoRA-serving runtime that adopts sgconf with a schema of its own."""

from minirt.config import SCHEMA, get_api, get_cache, get_lora
from minirt.pool import AdapterPool

__all__ = ["SCHEMA", "AdapterPool", "get_api", "get_cache", "get_lora"]
