"""sgconf: declarations, sources, validation and resolution of a serving runtime's configuration."""

from sgconf.errors import ConfigError, DeclarationError, OverrideRefused, Problem, ResolutionError, UnknownFieldError
from sgconf.fields import FieldSpec, setting
from sgconf.namespaces import (
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
from sgconf.record import ServerArgs, to_bags
from sgconf.registry import FieldInfo, field_info, field_names, fields, namespace_of

__all__ = [
    "ConfigError",
    "DeclarationError",
    "DeviceConfig",
    "DisaggConfig",
    "ExecConfig",
    "FieldInfo",
    "FieldSpec",
    "GraphConfig",
    "KernelConfig",
    "MambaConfig",
    "MemoryConfig",
    "ModelConfig",
    "ObservabilityConfig",
    "OverrideRefused",
    "ParallelConfig",
    "Problem",
    "ResolutionError",
    "ScheduleConfig",
    "ServerArgs",
    "ServingConfig",
    "SpecConfig",
    "UnknownFieldError",
    "field_info",
    "field_names",
    "fields",
    "namespace_of",
    "setting",
    "to_bags",
]
