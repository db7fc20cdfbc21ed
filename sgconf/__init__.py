"""sgconf: declarations, sources, validation and resolution of a serving runtime's configuration.

The framework's own names come first; the built-in serving schema's (`SERVING`, its
namespace classes, and the calls bound to it: `load`, `build_record`, `fields`, ...) are
every name `sgconf.serving` exports, the one place that binds them. `__all__` is derived
from the imports below, so each public name is stated once.
"""

import types as _types

from sgconf.adopt import adopt, from_dataclass
from sgconf.errors import (
    ConfigError,
    DeclarationError,
    OverrideRefused,
    Problem,
    ResolutionError,
    UnknownFieldError,
    UsageError,
)
from sgconf.fieldinfo import FieldInfo
from sgconf.fields import REQUIRED, FieldSpec, setting
from sgconf.frozen import FrozenDict, deep_freeze
from sgconf.hooks import Derived, Rule, RuntimeKnobs, Step
from sgconf.loading import Loaded, explain, provenance_of
from sgconf.provenance import Origin
from sgconf.record import record_to_dict, to_bags
from sgconf.resolution import Decision, Resolved, resolve_once
from sgconf.schema import Schema, schema_of
from sgconf.serving import *  # noqa: F403 -- every name the serving binding exports (its __all__)

__all__ = sorted(
    name for name, value in globals().items() if not name.startswith("_") and not isinstance(value, _types.ModuleType)
)
