"""What a backend needs to know about the layer it attends for, and the layer's window.

The sliding window is a property of the model layer (its mask), read from the model
shape; where the layer's K/V lives is a property of the pool (see `attention.swa`). The
two are kept apart on purpose: a draft worker may run a sliding-window layer over a
full-capacity pool.
"""

from __future__ import annotations

from typing import Any

import attrs


@attrs.frozen(slots=True)
class AttentionLayer:
    """One attention layer as a backend sees it: its global id and its softmax scale.

    `scaling` defaults to `head_dim ** -0.5`, taken from the query's last dimension.
    """

    layer_id: int
    scaling: float | None = None

    @classmethod
    def of(cls, layer: AttentionLayer | int) -> AttentionLayer:
        return layer if isinstance(layer, AttentionLayer) else cls(int(layer))


def layer_window(shape: Any, layer_id: int) -> int | None:
    """The sliding window of `layer_id` in `shape`, None for a full-attention layer.

    A query at position i sees keys j with `i - window < j <= i`. Accepts any shape that
    offers `window_of(layer_id)`, or `sliding_window` with `swa_layer_ids` /
    `swa_attention_layer_ids`; a shape with neither (or None) means full attention.
    """
    if shape is None:
        return None
    window_of = getattr(shape, "window_of", None)
    if callable(window_of):
        return window_of(layer_id)
    window = getattr(shape, "sliding_window", None)
    if not window:
        return None
    for attr in ("swa_layer_ids", "swa_attention_layer_ids"):
        ids = getattr(shape, attr, None)
        if ids is not None:
            return int(window) if layer_id in ids else None
    return None
