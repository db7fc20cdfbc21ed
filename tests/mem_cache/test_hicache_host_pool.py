"""HostKVPool: layout, LRU eviction, payload round trips; host capacity from the config values."""

from __future__ import annotations

import pytest
import torch

from mem_cache.hicache import (
    HostKVPool,
    KVLayout,
    LayerGeometry,
    LayoutMismatchError,
    host_pool_pages,
    layout_of,
)
from mem_cache.pools import MHATokenToKVPool, SWAKVPool


def _layout(page: int = 2, dtype: torch.dtype = torch.float32) -> KVLayout:
    return KVLayout(page, dtype, (LayerGeometry(0, (2, 4), (2, 4)), LayerGeometry(3, (1, 8), (1, 6), True)))


def test_layout_of_reads_every_layers_geometry():
    """An SWA pool with its own geometry yields per-layer shapes and SWA flags."""
    pool = SWAKVPool(
        16,
        8,
        2,
        "bfloat16",
        2,
        4,
        4,
        swa_attention_layer_ids=[1],
        full_attention_layer_ids=[0, 2],
        swa_head_num=1,
        swa_head_dim=8,
    )
    layout = layout_of(pool)
    assert layout.layers == (
        LayerGeometry(0, (2, 4), (2, 4), False),
        LayerGeometry(1, (1, 8), (1, 8), True),
        LayerGeometry(2, (2, 4), (2, 4), False),
    )
    assert layout.page_size == 2 and layout.dtype == torch.bfloat16
    assert layout.token_bytes == 2 * (2 * 8 + 2 * 8 + 2 * 8)  # bf16 x (k+v per layer)
    assert layout.page_bytes == 2 * layout.token_bytes


def test_layout_tag_depends_on_geometry():
    """Different dtypes or page sizes give different tags; equal layouts equal tags."""
    assert _layout().tag == _layout().tag
    assert _layout().tag != _layout(page=4).tag
    assert _layout().tag != _layout(dtype=torch.float16).tag


def test_fp8_is_held_as_bytes_on_host():
    """fp8 pages are kept as uint8 on host."""
    pool = MHATokenToKVPool(8, 2, "fp8_e4m3", 1, 4, layer_ids=[0])
    layout = layout_of(pool)
    assert layout.host_dtype == torch.uint8
    assert layout.page_bytes == 2 * 8


@pytest.mark.parametrize(
    ("tokens", "ratio", "size_gb", "pages"),
    [(100, 2.0, 0, 100), (100, 0.5, 0, 25), (10, 0.1, 0, 1), (100, 2.0, 1, 10**9 // 240)],
)
def test_host_pool_pages(tokens, ratio, size_gb, pages):
    """hicache_size (GB, 10**9 bytes) wins over hicache_ratio; at least one page."""
    layout = _layout()  # 120 bytes per token with float32, 240 per page
    assert layout.page_bytes == 240
    assert host_pool_pages(tokens, layout, hicache_ratio=ratio, hicache_size=size_gb) == pages


def test_tensors_are_per_layer_page_first_within_layer():
    """Each layer holds [capacity, page, heads, dim] keys and values."""
    host = HostKVPool(_layout(), 3, pin_memory=False)
    assert tuple(host.k[0].shape) == (3, 2, 2, 4)
    assert tuple(host.v[3].shape) == (3, 2, 1, 6)
    assert host.nbytes() == 3 * 240


def test_lru_evicts_the_tail_of_a_prefix_first():
    """After touch(keys), the first page of a prefix is the most recently used."""
    host = HostKVPool(_layout(), 3, pin_memory=False)
    host.allocate(["a", "b", "c"])
    host.touch(["a", "b", "c"])
    _, evicted = host.allocate(["d"])
    assert [e.key for e in evicted] == ["c"]
    assert "a" in host and "b" in host and "d" in host


def test_protected_pages_are_never_evicted():
    """When every resident page is protected, allocation covers only a prefix of the keys."""
    host = HostKVPool(_layout(), 2, pin_memory=False)
    host.allocate(["a", "b"])
    slots, evicted = host.allocate(["c", "d"], protect=["a"])
    assert len(slots) == 1 and [e.key for e in evicted] == ["b"]
    slots, evicted = host.allocate(["e"], protect=["a", "c"])
    assert slots == [] and evicted == []


def test_evicted_unstored_pages_carry_their_payload_only_when_asked():
    """save_unstored keeps the bytes of pages storage lacks; stored pages come back empty."""
    host = HostKVPool(_layout(), 2, pin_memory=False)
    host.allocate(["a", "b"])
    host.page("a").stored = True
    _, evicted = host.allocate(["c", "d"], save_unstored=True)
    assert [(e.key, e.payload is None) for e in evicted] == [("a", True), ("b", False)]
    assert len(evicted[1].payload) == 240


def test_write_read_and_payload_round_trip():
    """Tensors written to a slot read back equal, and survive payload -> load_payload."""
    layout = _layout(dtype=torch.bfloat16)
    host = HostKVPool(layout, 4, pin_memory=False)
    slots, _ = host.allocate(["a", "b"])
    g = torch.Generator().manual_seed(0)
    k = {0: torch.randn(4, 2, 4, generator=g).bfloat16(), 3: torch.randn(4, 1, 8, generator=g).bfloat16()}
    v = {0: torch.randn(4, 2, 4, generator=g).bfloat16(), 3: torch.randn(4, 1, 6, generator=g).bfloat16()}
    host.write(slots, k, v)
    rk, rv = host.read(slots)
    assert all(torch.equal(rk[i], k[i]) and torch.equal(rv[i], v[i]) for i in (0, 3))
    payload = host.payload("b")
    assert len(payload) == layout.page_bytes
    other = HostKVPool(layout, 1, pin_memory=False)
    (slot,), _ = other.allocate(["b"])
    other.load_payload(slot, payload)
    ok, ov = other.read([slot])
    assert torch.equal(ok[3], k[3][2:4]) and torch.equal(ov[0], v[0][2:4])


def test_wrong_shapes_and_lengths_are_layout_errors():
    """A payload of the wrong length or tensors of the wrong shape raise LayoutMismatchError."""
    host = HostKVPool(_layout(), 1, pin_memory=False)
    (slot,), _ = host.allocate(["a"])
    with pytest.raises(ValueError, match="page payload is 3 bytes, this layout needs 240") as exc:
        host.load_payload(slot, b"abc")
    assert type(exc.value) is LayoutMismatchError  # a ValueError, so callers catching bad input catch it
    bad = {0: torch.zeros(2, 2, 5), 3: torch.zeros(2, 1, 8)}
    with pytest.raises(LayoutMismatchError, match="layer 0"):
        host.write([slot], bad, bad)
