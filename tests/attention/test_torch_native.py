"""torch_native against a dense float64 reference, over real pools, allocators and SWA maps."""

from __future__ import annotations

import pytest
import torch

from attention import (
    AttentionInputError,
    ForwardBatch,
    TorchNativeBackend,
    attend,
    resolve_swa_kv_pool,
)
from mem_cache.allocator import PagedTokenToKVPoolAllocator
from mem_cache.pools import MHATokenToKVPool

SLIDING, FULL = "sliding_attention", "full_attention"
TOL = 1e-5


def _prefix_extend_decode(world, decode_steps: int = 5) -> None:
    """Three requests of different lengths: a prefill, a chunk on top of it, then decodes."""
    reqs = world.new_requests(3)
    world.extend(reqs, [5, 19, 33])  # prefill: no prefix yet
    world.extend(reqs, [7, 1, 12])  # extend over a cached prefix
    for _ in range(decode_steps):
        world.decode(reqs)


@pytest.mark.parametrize("page_size", [1, 16])
def test_hybrid_swa_target_and_draft_match_dense(make_world, page_size):
    """Full and SWA layers of a hybrid target and of a full-pool draft match dense float64 attention."""
    world = make_world(page_size, hybrid=True)
    world.add_draft(world.shape_of([SLIDING, FULL]), algorithm="EAGLE")
    _prefix_extend_decode(world)
    # 2 extends + 5 decodes, 3 requests, 4 target + 2 draft layers
    assert len(world.errors) == 7 * 3 * 6
    assert max(world.errors) < TOL
    # the window really cut the sequences: the longest request is far past it
    assert max(len(r.slots) for r in world.reqs) > 4 * world.shape_of([SLIDING]).sliding_window


@pytest.mark.parametrize("page_size", [1, 16])
def test_full_only_target_matches_dense(make_world, page_size):
    """A full-attention model over an MHA pool with a paged allocator matches dense attention."""
    world = make_world(page_size, hybrid=False)
    _prefix_extend_decode(world, decode_steps=3)
    assert len(world.errors) == 5 * 3 * 4
    assert max(world.errors) < TOL


def test_swa_layers_never_read_evicted_slots(make_world):
    """SWA keys that left the window are freed and their slots reused; results stay exact."""
    world = make_world(1, hybrid=True)
    first = world.new_requests(1)
    world.extend(first, [30])
    assert first[0].swa_freed == 30 - world.shape_of([SLIDING]).sliding_window + 1
    pool = world.target.runner.token_to_kv_pool
    # the freed tokens' map entries point at the reserved slot 0, not at their old rows
    assert pool.translate_loc_from_full_to_swa(torch.tensor(first[0].slots[:3])).tolist() == [0, 0, 0]
    second = world.new_requests(1)
    world.extend(second, [20])  # reuses the SWA slots the first request freed
    world.decode(first + second)
    assert max(world.errors) < TOL


def test_draft_with_full_pool_reads_its_own_kv(make_world):
    """An EAGLE draft on an SWA target reads its own full pool, never through the target's map.

    Resolving the allocator's SWA pool here would send the draft's SWA layer to the
    target's SWA buffers at translated slots: wrong K/V, a collapsed accept length.
    """
    world = make_world(16, hybrid=True)
    draft = world.add_draft(world.shape_of([SLIDING, FULL]), algorithm="EAGLE")
    assert resolve_swa_kv_pool(draft.runner) is None
    reqs = world.new_requests(2)
    world.extend(reqs, [24, 40])
    draft_errors = []
    for _ in range(4):
        batch = world.decode(reqs)
        # the draft runs last: its 2 layers x 2 requests are the step's last 4 errors
        draft_errors.append(max(world.errors[-4:]))
    assert max(draft_errors) < TOL
    # the draft's K/V sits at the full slots in its own pool...
    slots = batch.out_cache_loc
    k0_draft = draft.runner.token_to_kv_pool.get_key_buffer(0)[slots]
    hist = torch.stack([draft.history[(r.row, 0)][0][-1] for r in reqs]).float()
    assert torch.equal(k0_draft, hist)
    # ...and the target's SWA buffer holds the target's K/V, not the draft's
    target_pool = world.target.runner.token_to_kv_pool
    k0_target = target_pool.get_key_buffer(0)[target_pool.translate_loc_from_full_to_swa(slots)]
    target_hist = torch.stack([world.target.history[(r.row, 0)][0][-1] for r in reqs]).float()
    assert torch.equal(k0_target, target_hist)


def test_frozen_kv_draft_reads_target_swa_kv(make_world):
    """A FROZEN_KV_MTP draft attends its SWA layer over the target's SWA K/V through the target's map."""
    world = make_world(1, hybrid=True, evict=False)  # the draft re-reads the last position's window
    reqs = world.new_requests(2)
    world.extend(reqs, [12, 21])
    world.decode(reqs)
    draft = world.attach(
        "draft",
        world.target.runner.token_to_kv_pool.full_kv_pool,
        world.target.runner.model_shape,
        algorithm="FROZEN_KV_MTP",
    )
    draft.runner.token_to_kv_pool = MHATokenToKVPool(512, 1, torch.float32, 2, 16, layer_ids=(0, 1, 2, 3))
    assert resolve_swa_kv_pool(draft.runner) is world.target.runner.token_to_kv_pool
    seq = [len(r.slots) for r in reqs]
    # a pure read of the last position: the draft writes nothing into the frozen cache
    batch = ForwardBatch.extend(
        req_pool_indices=[r.row for r in reqs],
        seq_lens=seq,
        extend_prefix_lens=[s - 1 for s in seq],
        out_cache_loc=[r.slots[-1] for r in reqs],
    )
    q = world.randn(2, 4, 16)
    out = draft.backend.forward_extend(q, world.randn(2, 2, 16), world.randn(2, 2, 16), 0, batch, save_kv_cache=False)
    for i, r in enumerate(reqs):
        hk, hv = world.target.history[(r.row, 0)]
        ref = world.dense_reference(q[i : i + 1], hk, hv, seq[i] - 1, 8)
        assert world.rel_error(out[i : i + 1], ref) < TOL


def test_backend_follows_a_pool_swap(make_world):
    """After the runner swaps its pool, the next forward writes to and reads from the new pool."""
    world = make_world(1, hybrid=False)
    reqs = world.new_requests(2)
    world.extend(reqs, [9, 14])
    runner = world.target.runner
    old = runner.token_to_kv_pool
    new = MHATokenToKVPool(512, 1, torch.float32, 2, 16, layer_ids=range(4))
    for lid in range(4):
        new.get_key_buffer(lid).copy_(old.get_key_buffer(lid))
        new.get_value_buffer(lid).copy_(old.get_value_buffer(lid))
        old.get_key_buffer(lid).zero_()  # a backend still reading the old pool sees zeros
        old.get_value_buffer(lid).zero_()
    runner.swap_pool(new, PagedTokenToKVPoolAllocator(512, 1, kvcache=new))
    world.allocator = runner.token_to_kv_pool_allocator
    # the allocator is fresh: hand it the slots in use so new ones do not collide
    assert world.allocator.alloc(sum(len(r.slots) for r in reqs)) is not None
    world.decode(reqs)
    assert max(world.errors) < TOL
    slots = torch.tensor([r.slots[-1] for r in reqs])
    assert bool(new.get_key_buffer(0)[slots].abs().sum() > 0)
    assert bool(old.get_key_buffer(0)[slots].abs().sum() == 0)


def test_same_batch_after_swap_uses_new_pool(make_world):
    """Metadata built before a swap is rebuilt when the same batch is run after it."""
    world = make_world(1, hybrid=False)
    reqs = world.new_requests(1)
    world.extend(reqs, [4])
    runner, backend = world.target.runner, world.target.backend
    batch = world.decode(reqs)
    before = backend.init_forward_metadata(batch)
    new = MHATokenToKVPool(512, 1, torch.float32, 2, 16, layer_ids=range(4))
    runner.swap_pool(new)
    k = torch.ones(1, 2, 16)
    backend.forward(torch.zeros(1, 4, 16), k, k, 0, batch)
    assert before.active_pool is not new
    assert torch.equal(new.get_key_buffer(0)[batch.out_cache_loc], k)


def test_attend_masks_exactly():
    """With uniform scores a query averages exactly the values its causal window admits."""
    q = torch.zeros(3, 2, 4)
    k = torch.zeros(6, 1, 4)
    v = torch.arange(6, dtype=torch.float32).view(6, 1, 1).expand(6, 1, 4)
    out = attend(q, k, v, torch.tensor([3, 4, 5]), torch.arange(6), window=3, scaling=1.0)
    # position 3 sees 1,2,3; 4 sees 2,3,4; 5 sees 3,4,5
    assert out[:, 0, 0].tolist() == [2.0, 3.0, 4.0]
    out = attend(q, k, v, torch.tensor([0, 1, 5]), torch.arange(6), window=None, scaling=1.0)
    assert out[:, 1, 0].tolist() == [0.0, 0.5, 2.5]


def _tiny_full_world(make_world):
    world = make_world(1, hybrid=False)
    reqs = world.new_requests(1)
    world.extend(reqs, [3])
    return world, reqs


def test_decode_rejects_multi_token_batch(make_world):
    """forward_decode refuses a batch that adds more than one token per request."""
    world, reqs = _tiny_full_world(make_world)
    batch = world.extend(reqs, [2])
    x = torch.zeros(2, 4, 16)
    with pytest.raises(AttentionInputError, match="exactly one new token per request -- use forward_extend"):
        world.target.backend.forward_decode(x, x[:, :2], x[:, :2], 0, batch)


def test_forward_checks_the_table_was_written(make_world):
    """A batch whose slots are not in the req-to-token rows is refused before anything is written."""
    world, reqs = _tiny_full_world(make_world)
    batch = ForwardBatch.decode(req_pool_indices=[reqs[0].row], seq_lens=[4], out_cache_loc=[77])
    pool = world.target.runner.token_to_kv_pool
    x = torch.ones(1, 2, 16)
    with pytest.raises(AttentionInputError, match="out_cache_loc differs from the req-to-token rows"):
        world.target.backend.forward(torch.ones(1, 4, 16), x, x, 0, batch)
    assert float(pool.get_key_buffer(0)[77].abs().sum()) == 0.0


@pytest.mark.parametrize(
    ("q", "k", "message"),
    [
        ((1, 3, 16), (1, 2, 16), "q has 3 heads of dim 16, k 2 and v 2 heads of dim 16: q heads must be a multiple"),
        ((1, 4, 8), (1, 2, 16), "q has 4 heads of dim 8, k 2 and v 2 heads of dim 16: .* the same head_dim"),
        ((2, 4, 16), (2, 2, 16), "q, k, v have 2, 2, 2 rows for 1 new tokens"),
        ((1, 64), (1, 2, 16), r"q, k, v must be \[tokens, heads, dim\]"),
    ],
)
def test_shape_errors(make_world, q, k, message):
    """Mismatched q/k/v shapes are refused with what was expected."""
    world, reqs = _tiny_full_world(make_world)
    loc = world.allocator.alloc(1)
    world.req_to_token.write(reqs[0].row, 3, loc)
    batch = ForwardBatch.decode(req_pool_indices=[reqs[0].row], seq_lens=[4], out_cache_loc=loc)
    with pytest.raises(AttentionInputError, match=message):
        world.target.backend.forward(torch.zeros(q), torch.zeros(k), torch.zeros(k), 0, batch)


def test_unknown_layer_is_an_input_error(make_world):
    """A layer the runner's pool does not hold is named in the error."""
    world, reqs = _tiny_full_world(make_world)
    batch = world.decode(reqs)
    x = torch.zeros(1, 2, 16)
    with pytest.raises(AttentionInputError, match="layer 9 has no KV buffer in the runner's pool"):
        world.target.backend.forward(torch.zeros(1, 4, 16), x, x, 9, batch)


def test_backend_name():
    assert TorchNativeBackend.name == "torch_native"
    assert TorchNativeBackend.unavailable_reason() is None


@pytest.mark.parametrize("budget", [1, 12_800])
def test_chunked_decode_matches_dense(make_world, monkeypatch, budget):
    """A decode gathered a few requests at a time (one, or two then one) still matches dense attention."""
    import attention.torch_native as tn

    monkeypatch.setattr(tn, "_CPU_CHUNK_BYTES", budget)
    world = make_world(16, hybrid=True)
    reqs = world.new_requests(3)
    world.extend(reqs, [12, 20, 45])
    kv = world.target.backend.layer_kv(world.target.backend.init_forward_metadata(world.decode(reqs)), 1)
    # full layers: 46-token spans -> 1 or 2 requests per gather; the last chunk is short
    assert tn._requests_per_chunk(kv, 3, 47) == (1 if budget == 1 else 2)
    world.decode(reqs)
    assert len(world.errors) == 3 * 3 * 4
    assert max(world.errors) < TOL


def test_decode_reuses_its_gather_workspace(make_world):
    """Decode gathers into buffers kept across layers and steps, not a fresh tensor per call."""
    world = make_world(1, hybrid=False)
    reqs = world.new_requests(2)
    world.extend(reqs, [30, 17])
    backend = world.target.backend
    world.decode(reqs)
    ptrs = [w.data_ptr() for w in backend._workspace]
    for _ in range(3):
        world.decode(reqs)
    assert [w.data_ptr() for w in backend._workspace] == ptrs
    assert max(world.errors) < TOL


def test_decode_under_inference_mode_then_outside(make_world):
    """A workspace first filled under inference_mode can still be written by a later plain call."""
    world = make_world(1, hybrid=True)
    reqs = world.new_requests(2)
    world.extend(reqs, [9, 14])
    with torch.inference_mode():
        world.decode(reqs)
    world.decode(reqs)
    assert not any(w.is_inference() for w in world.target.backend._workspace)
    assert max(world.errors) < TOL


def test_batch_outside_the_table_is_refused(make_world):
    """Rows outside the req-to-token table, or sequences longer than a row, are named before any write."""
    world, reqs = _tiny_full_world(make_world)
    backend = world.target.backend
    with pytest.raises(
        AttentionInputError,
        match=r"req_pool_indices \[9\] are outside the req-to-token table \(rows 0..8\) -- use rows",
    ):
        backend.init_forward_metadata(
            ForwardBatch.decode(req_pool_indices=[reqs[0].row, 9], seq_lens=[4, 1], out_cache_loc=[1, 2])
        )
    with pytest.raises(AttentionInputError, match="a seq_len of 257 exceeds the req-to-token row length 256 -- split"):
        backend.init_forward_metadata(
            ForwardBatch.decode(req_pool_indices=[reqs[0].row], seq_lens=[257], out_cache_loc=[1])
        )


@pytest.mark.parametrize("hybrid", [True, False], ids=["hybrid_swa", "full"])
def test_trailing_one_token_rows_of_an_extend_are_exact(make_world, hybrid, monkeypatch):
    """A mixed batch (a chunk, then one new token per decoding request) matches dense attention, as do an
    extend of only one-token rows and one whose one-token rows are not all at the end."""
    world = make_world(1, hybrid=hybrid)
    reqs = world.new_requests(4)
    world.extend(reqs, [5, 19, 33, 8])
    as_decode = []
    decode = TorchNativeBackend._forward_decode
    monkeypatch.setattr(
        TorchNativeBackend, "_forward_decode", lambda self, q, *a: as_decode.append(q.shape[0]) or decode(self, q, *a)
    )
    world.extend(reqs, [7, 1, 1, 1])  # the last three attend together, as a decode would
    world.extend(reqs, [1, 1, 1, 1])  # every row: no per-request part
    world.extend(reqs, [3, 1, 2, 1])  # one trailing row: request by request
    assert as_decode == [3] * 4 + [4] * 4  # one call per layer of each of the first two
    assert len(world.errors) == 4 * 4 * 4  # 4 extends, 4 requests, 4 layers
    assert max(world.errors) < TOL


@pytest.mark.parametrize(("budget", "groups"), [(1 << 25, [(0, 5)]), (1, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)])])
@pytest.mark.parametrize("hybrid", [True, False], ids=["hybrid_swa", "full"])
def test_extend_attends_requests_in_padded_groups(make_world, monkeypatch, budget, groups, hybrid):
    """Short prompts of different lengths share one padded, masked call per layer; under a small budget each
    request is its own group; both match dense attention, over a prefix and across the window."""
    import attention.torch_native as tn

    monkeypatch.setattr(tn, "_CPU_CHUNK_BYTES", budget)
    seen = []
    plan = TorchNativeBackend._extend_groups
    monkeypatch.setattr(TorchNativeBackend, "_extend_groups", lambda self, *a: seen.append(plan(self, *a)) or seen[-1])
    world = make_world(1, hybrid=hybrid)
    reqs = world.new_requests(5)
    world.extend(reqs, [1, 9, 3, 40, 2])  # a prefill: one request longer than the window
    world.extend(reqs, [6, 2, 11, 1, 5])  # over a cached prefix
    assert seen and all(g == groups for g in seen)
    assert len(world.errors) == 2 * 5 * 4
    assert max(world.errors) < TOL
