"""ForwardBatch construction: derived lengths and the errors for inconsistent input."""

from __future__ import annotations

import pytest
import torch

from attention import AttentionInputError, ForwardBatch, ForwardMode


def test_extend_lengths():
    """An extend batch derives per-request new-token counts from seq_lens and prefixes."""
    b = ForwardBatch.extend(req_pool_indices=[2, 1], seq_lens=[5, 3], extend_prefix_lens=[2, 0], out_cache_loc=range(6))
    assert b.mode is ForwardMode.EXTEND
    assert b.batch_size == 2
    assert b.extend_lens_cpu == (3, 3)
    assert b.extend_seq_lens.tolist() == [3, 3]
    assert b.num_new_tokens == 6
    assert b.out_cache_loc.dtype == torch.int64


def test_decode_prefix_is_seq_minus_one():
    """A decode batch adds one token per request."""
    b = ForwardBatch.decode(req_pool_indices=torch.tensor([3, 4]), seq_lens=torch.tensor([7, 1]), out_cache_loc=[9, 10])
    assert b.mode is ForwardMode.DECODE
    assert b.prefix_lens_cpu == (6, 0)
    assert b.extend_lens_cpu == (1, 1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"req_pool_indices": [1], "seq_lens": [2, 3], "extend_prefix_lens": [0, 0], "out_cache_loc": [1] * 5},
            "batch sizes disagree: 1 req_pool_indices, 2 seq_lens, 2 extend_prefix_lens -- pass one entry per request",
        ),
        (
            {"req_pool_indices": [1], "seq_lens": [2], "extend_prefix_lens": [2], "out_cache_loc": []},
            "request 0 has seq_len 2 and prefix 2: each request must add at least one token",
        ),
        (
            {"req_pool_indices": [1], "seq_lens": [4], "extend_prefix_lens": [1], "out_cache_loc": [5, 6]},
            "'out_cache_loc' has 2 slots for 3 new tokens -- allocate one slot per new token",
        ),
        (
            {"req_pool_indices": [1], "seq_lens": [1.5], "extend_prefix_lens": [0], "out_cache_loc": [5]},
            "'seq_lens' must hold integers (got torch.float32)",
        ),
        (
            {"req_pool_indices": [[1]], "seq_lens": [1], "extend_prefix_lens": [0], "out_cache_loc": [5]},
            "'req_pool_indices' must be a 1-d tensor (got shape (1, 1))",
        ),
    ],
)
def test_inconsistent_batches_are_refused(kwargs, message):
    """Each inconsistency is reported with the offending numbers."""
    with pytest.raises(AttentionInputError) as info:
        ForwardBatch.extend(**kwargs)
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)


def test_batches_compare_by_identity():
    """Batches hold tensors, so they compare and hash by identity (no tensor comparisons)."""
    kw = {"req_pool_indices": [1], "seq_lens": [2], "out_cache_loc": [5]}
    a, b = ForwardBatch.decode(**kw), ForwardBatch.decode(**kw)
    assert a == a
    assert a != b
    assert len({a, b}) == 2
