"""Provenance: where each leaf's value came from, layer by layer, winner last."""

from __future__ import annotations

from typing import Any

import attrs

# Layers, lowest precedence first. Post-publish layers are appended by the runtime.
LAYERS = ("default", "file", "env", "cli", "resolution", "override", "scoped")


@attrs.frozen(slots=True)
class Origin:
    """One layer's contribution to a field: the layer, its detail (path, env var, flag, step, source) and the value."""

    layer: str
    detail: str
    value: Any
    generation: int | None = None
    time: float | None = None

    def describe(self) -> str:
        """`from env SGCONF_PAGE_SIZE`, `from /etc/app.toml`, `from --page-size`, `from resolution:page_size`."""
        if self.layer == "default":
            return "from defaults"
        if self.layer == "env":
            return f"from env {self.detail}"
        if self.layer in ("file", "cli"):
            return f"from {self.detail}"
        return f"from {self.layer}:{self.detail}" if self.layer != "resolution" else f"from resolution:{self.detail}"
