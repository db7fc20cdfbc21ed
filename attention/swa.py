"""Which SWA KV pool an attention backend uses, and translation of full-pool slots into it.

Tokens are allocated in the full pool's index space: `out_cache_loc` and the
req-to-token table hold full-pool slots. A sliding-window layer stores its K/V in the
SWA sub-pool, at the slot `full_to_swa_index_mapping[full_slot]`. Which SWA pool (and
so which map) a backend must use is decided by `resolve_swa_kv_pool`, the one function
every backend calls; the decision table is DESIGN.md section 6:

| active pool is SWA | draft worker | algorithm     | allocator's pool is SWA | result            |
|--------------------|--------------|---------------|-------------------------|-------------------|
| yes                | any          | any           | any                     | the active pool   |
| no                 | no           | any           | yes / no                | allocator's pool / None |
| no                 | yes          | not FROZEN_KV_MTP | any                 | None              |
| no                 | yes          | FROZEN_KV_MTP | yes / no                | allocator's pool / None |

The active pool is judged by its own type, never by the allocator's type: a draft
worker with a full-only pool shares the target's SWA allocator, and reading through
the target's map would fetch the wrong K/V for every draft token (it shows up as a
collapsed accept length, not as an error).
"""

from __future__ import annotations

from typing import Any

import torch

from attention.runner import ModelRunnerLike, algorithm_name
from mem_cache.pools import SWAKVPool

# Draft algorithms whose draft layers read the target's frozen KV cache through the
# target's SWA map instead of keeping a pool of their own.
SHARED_KV_DRAFT_ALGORITHMS = frozenset({"FROZEN_KV_MTP"})


def _allocator_pool(allocator: Any) -> Any:
    if allocator is None:
        return None
    get = getattr(allocator, "get_kvcache", None)
    return get() if callable(get) else None


def decide_swa_kv_pool(runner: ModelRunnerLike) -> tuple[SWAKVPool | None, str]:
    """The decision table as (pool, rule): the rule names the row that applied, for logs and tests."""
    active = runner.token_to_kv_pool
    if isinstance(active, SWAKVPool):
        return active, "active_pool_is_swa"
    shared = _allocator_pool(runner.token_to_kv_pool_allocator)
    shared_swa = shared if isinstance(shared, SWAKVPool) else None
    if not runner.is_draft_worker:
        return shared_swa, "target_uses_allocator_pool" if shared_swa is not None else "no_swa_pool"
    algorithm = algorithm_name(runner.spec_algorithm)
    if algorithm in SHARED_KV_DRAFT_ALGORITHMS:
        return shared_swa, "draft_shares_target_kv" if shared_swa is not None else "no_swa_pool"
    # A draft worker with a full-only pool of its own: its slots are full-pool slots,
    # and the target's map must not be applied to them.
    return None, "draft_with_full_pool"


def resolve_swa_kv_pool(runner: ModelRunnerLike) -> SWAKVPool | None:
    """The SWA pool whose map and SWA buffers `runner`'s backend must use, or None for none.

    Call it at backend init and again after every pool swap (backends call it per
    forward): the answer depends on the runner's active pool, which can change.
    """
    return decide_swa_kv_pool(runner)[0]


def translate_out_cache_loc(swa_pool: SWAKVPool, out_cache_loc: torch.Tensor) -> torch.Tensor:
    """SWA-pool slots for the full-pool slots of the tokens being written."""
    return swa_pool.translate_loc_from_full_to_swa(out_cache_loc).to(torch.int64)


def translate_page_table(swa_pool: SWAKVPool, page_table: torch.Tensor) -> torch.Tensor:
    """An SWA-pool page table (any shape) for a table of full-pool slots."""
    mapping = swa_pool.full_to_swa_index_mapping
    return mapping[page_table.to(torch.int64)].to(torch.int64)
