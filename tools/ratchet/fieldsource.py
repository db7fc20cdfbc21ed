"""The default field sources for sgconf's built-in schema, read through `sgconf.serving`.

`ratchet.toml` names these by `module:callable`, so another runtime points them at its
own declarations (a `Schema`, a dataclass) without touching the ratchet.
"""

from __future__ import annotations


def hot_field_names() -> list[str]:
    """Declared fields flagged `hot` (may be overridden after publish), in declaration order."""
    from sgconf.serving import fields  # the built-in schema: the default for this repository

    return [name for name, info in fields().items() if info.setting.hot]
