"""sgconf: declarations, sources, validation and resolution of a serving runtime's configuration."""

from sgconf.adopt import adopt, from_dataclass
from sgconf.dump import nested
from sgconf.errors import (
    ConfigError,
    DeclarationError,
    OverrideRefused,
    Problem,
    ResolutionError,
    UnknownFieldError,
    UsageError,
)
from sgconf.fields import REQUIRED, FieldSpec, setting
from sgconf.frozen import FrozenDict, deep_freeze
from sgconf.json_schema import config_schema
from sgconf.loading import Loaded, explain, load, provenance_of
from sgconf.models import builtin_model_config, load_model_config
from sgconf.namespaces import (
    SERVING,
    DeviceConfig,
    DisaggConfig,
    ExecConfig,
    GraphConfig,
    KernelConfig,
    MambaConfig,
    MemoryConfig,
    ModelConfig,
    ObservabilityConfig,
    ParallelConfig,
    ScheduleConfig,
    ServingConfig,
    SpecConfig,
)
from sgconf.provenance import Origin
from sgconf.record import ServerArgs, record_to_dict, to_bags
from sgconf.registry import FieldInfo, field_info, field_names, fields, namespace_of
from sgconf.resolution import Decision, Resolved, resolve_once
from sgconf.rules import RULES, Rule, check_rules
from sgconf.schema import Schema, schema_of
from sgconf.sources import RESERVED_ENV
from sgconf.validation import build_record, convert_fields

__all__ = [
    "ConfigError",
    "Decision",
    "DeclarationError",
    "DeviceConfig",
    "DisaggConfig",
    "ExecConfig",
    "FieldInfo",
    "FieldSpec",
    "FrozenDict",
    "GraphConfig",
    "KernelConfig",
    "Loaded",
    "MambaConfig",
    "MemoryConfig",
    "ModelConfig",
    "ObservabilityConfig",
    "Origin",
    "OverrideRefused",
    "ParallelConfig",
    "Problem",
    "REQUIRED",
    "RESERVED_ENV",
    "RULES",
    "ResolutionError",
    "Resolved",
    "Rule",
    "SERVING",
    "ScheduleConfig",
    "Schema",
    "ServerArgs",
    "ServingConfig",
    "SpecConfig",
    "UnknownFieldError",
    "UsageError",
    "adopt",
    "build_record",
    "builtin_model_config",
    "check_rules",
    "config_schema",
    "convert_fields",
    "deep_freeze",
    "explain",
    "field_info",
    "field_names",
    "fields",
    "from_dataclass",
    "load",
    "load_model_config",
    "namespace_of",
    "nested",
    "provenance_of",
    "record_to_dict",
    "resolve_once",
    "schema_of",
    "setting",
    "to_bags",
]
