"""Page keys: one per full page, stable across processes, naming the layout."""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import sys

import pytest
import torch

from mem_cache.hicache import page_keys


def test_one_key_per_full_page_and_none_for_the_tail():
    """A trailing partial page gets no key."""
    assert len(page_keys(list(range(10)), 4)) == 2
    assert page_keys([1, 2, 3], 4) == []


def test_first_key_is_sha256_of_namespace_digest_and_tokens():
    """The encoding is fixed: sha256(sha256(namespace) || u64le tokens)."""
    seed = hashlib.sha256(b"").digest()
    expected = hashlib.sha256(seed + struct.pack("<2Q", 7, 9)).hexdigest()
    assert page_keys([7, 9], 2) == [expected]


def test_keys_chain_the_whole_prefix():
    """The same page after a different prefix gets a different key; a shared prefix shares keys."""
    a = page_keys([1, 2, 3, 4, 5, 6], 2)
    b = page_keys([9, 9, 3, 4, 5, 6], 2)
    c = page_keys([1, 2, 3, 4, 8, 8], 2)
    assert a[1] != b[1] and a[2] != b[2]
    assert a[:2] == c[:2] and a[2] != c[2]


def test_namespace_separates_layouts():
    """Two layouts never share a key for the same tokens."""
    assert page_keys([1, 2], 2, namespace="a") != page_keys([1, 2], 2, namespace="b")


def test_tensor_and_list_inputs_agree():
    """Token ids may be a tensor."""
    assert page_keys(torch.tensor([5, 6, 7, 8]), 2) == page_keys([5, 6, 7, 8], 2)


def test_page_size_below_one_is_refused():
    """A page size of 0 is a ValueError with the value."""
    with pytest.raises(ValueError, match=r"^page_size must be at least 1 \(got 0\)$"):
        page_keys([1], 0)


@pytest.mark.slow  # starts a process: `make test-fast` leaves it out
def test_keys_are_stable_across_processes():
    """A process with a different hash seed computes the same keys."""
    code = "from mem_cache.hicache import page_keys; print(page_keys(list(range(12)), 4, namespace='x'))"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == repr(page_keys(list(range(12)), 4, namespace="x"))
