"""Page keys: one stable name per full page of a token prefix.

A page's key hashes the previous page's key together with its own tokens, so a key
names the whole prefix up to and including that page, not just the page's tokens: two
prompts share a key exactly when they share the prefix. Keys are hex sha256 over a
fixed little-endian encoding, so they are the same in every process and on every
host (Python's `hash()` is salted per process and would not be).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence


def page_keys(token_ids: Sequence[int], page_size: int, *, namespace: str = "") -> list[str]:
    """Return one key per *full* page of `token_ids`; a trailing partial page gets none.

    `namespace` seeds the chain, so caches of different models (or KV layouts) that
    share a storage directory never collide. Raises ValueError for a page size < 1.
    """
    if page_size < 1:
        msg = f"page_size must be at least 1 (got {page_size!r})"
        raise ValueError(msg)
    ids = token_ids.tolist() if hasattr(token_ids, "tolist") else list(token_ids)
    n_full = len(ids) // page_size
    keys: list[str] = []
    prev = hashlib.sha256(namespace.encode("utf-8")).digest()
    for p in range(n_full):
        page = ids[p * page_size : (p + 1) * page_size]
        h = hashlib.sha256(prev)
        # unsigned 64-bit little-endian: token ids are non-negative vocab indices
        h.update(struct.pack(f"<{page_size}Q", *page))
        prev = h.digest()
        keys.append(h.hexdigest())
    return keys


__all__ = ["page_keys"]
