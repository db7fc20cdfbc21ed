"""Provenance: where each leaf's value came from, layer by layer, winner last."""

from __future__ import annotations

from typing import Any

import attrs

from sgconf.redaction import REDACTED, redact

# Layers, lowest precedence first. Post-publish layers are appended by the runtime.
LAYERS = ("default", "file", "env", "cli", "resolution", "override", "scoped")

# Every name provenance gives a layer of its own: the layers above, the detail of a default
# ("defaults") and a record given whole ("record"). A schema's own source may take none of
# them, or its values would read as theirs (`Schema.add_source` refuses it).
BUILT_IN_LAYERS = frozenset({*LAYERS, "defaults", "record"})


@attrs.frozen(slots=True, repr=False)
class Origin:
    """One layer's contribution to a field: the layer, its detail (path, env var, flag, step, source) and the value.

    `secret` marks the value of a secret field: repr() and `shown_value()` redact it, so
    a provenance chain can be logged or printed without leaking a key.
    """

    layer: str
    detail: str
    value: Any
    generation: int | None = None
    time: float | None = None
    secret: bool = attrs.field(default=False, kw_only=True)

    def describe(self) -> str:
        """`from env SGCONF_PAGE_SIZE`, `from /etc/app.toml`, `from --page-size`, `from resolution:page_size`."""
        if self.layer == "default":
            return "from defaults"
        if self.layer == "env":
            return f"from env {self.detail}"
        if self.layer in ("file", "cli"):
            return f"from {self.detail}"
        return f"from {self.layer}:{self.detail}"

    def shown_value(self) -> Any:
        """The value as it may be printed: a set secret is redacted (`sgconf.redaction`)."""
        return redact(self.value, self.secret)

    def __repr__(self) -> str:
        extra = "".join(
            f", {name}={getattr(self, name)!r}" for name in ("generation", "time") if getattr(self, name) is not None
        )
        return f"Origin(layer={self.layer!r}, detail={self.detail!r}, value={self.shown_value()!r}{extra})"


__all__ = ["BUILT_IN_LAYERS", "LAYERS", "REDACTED", "Origin"]
