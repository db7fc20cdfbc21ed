"""Pools: the request table, MHA buffers by global layer id, SWA routing and index maps."""

from __future__ import annotations

import pytest
import torch

from mem_cache.errors import DoubleFreeError, ForeignIndexError
from mem_cache.pools import MHATokenToKVPool, ReqToTokenPool, SWAKVPool


def test_req_to_token_rows() -> None:
    """Rows start at 1, a double free or row 0 is refused, and the table is int32 with a dummy row."""
    pool = ReqToTokenPool(3, 10)
    assert pool.req_to_token.shape == (4, 10) and pool.req_to_token.dtype == torch.int32
    assert pool.alloc(2) == [1, 2]
    assert pool.alloc(2) is None
    pool.free([1])
    with pytest.raises(DoubleFreeError, match="request row 1 is not allocated"):
        pool.free(1)
    with pytest.raises(ForeignIndexError, match=r"request row 0 is not in this pool \(rows 1..3; row 0 is reserved\)"):
        pool.free(0)
    assert pool.available_size() == 2


def test_mha_pool_buffers_by_global_layer_id() -> None:
    """Buffers are [size + page, heads, dim] per global layer id; set/get round-trip; unknown ids fail."""
    pool = MHATokenToKVPool(16, 4, "bfloat16", 2, 8, 4, layer_ids=[12, 13], device="cpu")
    assert pool.get_key_buffer(12).shape == (20, 2, 8)
    assert pool.get_value_buffer(13).shape == (20, 2, 4)
    loc = torch.tensor([5, 6])
    pool.set_kv_buffer(13, loc, torch.ones(2, 2, 8), torch.full((2, 2, 4), 2.0))
    k, v = pool.get_kv_buffer(13)
    assert k[5:7].sum().item() == 32 and v[5:7].sum().item() == 32 and k.dtype == torch.bfloat16
    assert pool.nbytes() == 2 * 20 * 2 * (8 + 4) * 2
    with pytest.raises(KeyError, match=r"layer 0 has no KV buffer in this pool \(holds layers \[12, 13\]\)"):
        pool.get_key_buffer(0)


def test_swa_pool_routes_and_translates() -> None:
    """SWA layers live in the SWA sub-pool and are written at translated slots; the map ends in -1."""
    pool = SWAKVPool(16, 8, 1, torch.float32, 1, 2, None, [0, 2], [1], swa_head_dim=4)
    assert pool.full_to_swa_index_mapping.shape == (18,) and int(pool.full_to_swa_index_mapping[-1]) == -1
    assert pool.is_swa_layer(0) and not pool.is_swa_layer(1)
    assert pool.get_key_buffer(0).shape == (9, 1, 4) and pool.get_key_buffer(1).shape == (17, 1, 2)
    pool.full_to_swa_index_mapping[10] = 3
    pool.set_kv_buffer(2, torch.tensor([10]), torch.ones(1, 1, 4), torch.ones(1, 1, 4))
    assert pool.get_key_buffer(2)[3].sum().item() == 4 and pool.get_key_buffer(2)[10 % 9].sum().item() == 0
    assert pool.translate_loc_from_full_to_swa(torch.tensor([10, -1])).tolist() == [3, -1]


def test_identity_pool_maps_slots_to_themselves() -> None:
    """A full-capacity SWA pool has an identity map, so SWA slots equal full slots."""
    pool = SWAKVPool(8, 8, 2, torch.float16, 1, 2, None, [0], [], identity_map=True)
    assert pool.translate_loc_from_full_to_swa(torch.tensor([3, 9, -1])).tolist() == [3, 9, -1]
    with pytest.raises(ValueError, match="identity map needs size_swa == size"):
        SWAKVPool(8, 4, 2, torch.float16, 1, 2, None, [0], [], identity_map=True)
