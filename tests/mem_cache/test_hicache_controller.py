"""HiCacheController: device <-> host <-> storage round trips, damage, policies, attach/detach."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import structlog
import torch

from mem_cache.hicache import (
    AttachStateError,
    HiCacheController,
    MemoryStorage,
    StorageAttachError,
    register_storage_backend,
)
from mem_cache.hicache.memory_storage import clear_shared_stores
from mem_cache.pools import MHATokenToKVPool, SWAKVPool
from sgconf.serving.plugins import STORAGE_BACKENDS

PAGE = 4
LAYERS = (0, 1, 2)
PROMPT = list(range(100, 114))  # 3 full pages and a 2-token tail


def make_pool(seed: int | None = 0, dtype: str = "float32") -> MHATokenToKVPool:
    pool = MHATokenToKVPool(64, PAGE, dtype, 2, 8, layer_ids=LAYERS)
    if seed is not None:
        g = torch.Generator().manual_seed(seed)
        for lid in LAYERS:
            for buf in pool.get_kv_buffer(lid):
                buf.copy_(torch.randn(buf.shape, generator=g).to(buf.dtype))
    return pool


def kv_at(pool, idx) -> list[torch.Tensor]:
    idx = torch.as_tensor(idx)
    return [t[idx].clone() for lid in LAYERS for t in pool.get_kv_buffer(lid)]


def same_kv(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.fixture
def controllers():
    made: list[HiCacheController] = []

    def make(pool=None, **kw) -> HiCacheController:
        kw.setdefault("pin_memory", False)
        c = HiCacheController(pool if pool is not None else make_pool(), **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()
    clear_shared_stores()


class GatedStorage(MemoryStorage):
    """A memory backend whose reads wait for a gate, to observe prefetch policies."""

    gate = threading.Event()

    def _read(self, key: str) -> bytes | None:
        assert self.gate.wait(10), "gate never opened"
        return super()._read(key)


@pytest.fixture
def gated():
    shared: dict[str, bytes] = {}
    GatedStorage.gate = threading.Event()
    key = bytes(range(32))  # backends sharing pages share their MAC key
    register_storage_backend("gated", lambda cfg: GatedStorage(shared, store_key=key))
    yield GatedStorage.gate
    GatedStorage.gate.set()
    STORAGE_BACKENDS.unregister("gated")


def test_round_trip_through_a_shared_directory(controllers, tmp_path):
    """KV backed up by one controller loads into a fresh pool byte for byte via the file backend."""
    src_pool = make_pool(seed=1)
    src = controllers(src_pool)
    src.attach_storage_backend("file", {"dir": str(tmp_path)})
    dev = torch.arange(10, 24)
    assert src.backup(PROMPT, dev) == 3
    src.flush()
    assert len(list(tmp_path.glob("*/*.kvpage"))) == 3

    dst_pool = make_pool(seed=None)
    dst = controllers(dst_pool)
    dst.attach_storage_backend("file", {"dir": str(tmp_path)})
    assert dst.lookup(PROMPT) == 12
    res = dst.prefetch(PROMPT, policy="wait_complete")
    assert (res.ready_tokens, res.requested_pages, res.fetched_pages, res.pending_pages) == (12, 3, 3, 0)
    target = torch.arange(30, 42)
    assert dst.load(PROMPT, 12, target) == 12
    assert same_kv(kv_at(dst_pool, target), kv_at(src_pool, dev[:12]))
    s = dst.stats
    assert (s.storage_hits, s.prefetched_pages, s.host_hits, s.corrupt_skipped) == (3, 3, 3, 0)


def test_round_trip_of_bfloat16_through_memory(controllers):
    """A bf16 pool round-trips through a named memory store."""
    src_pool = make_pool(seed=2, dtype="bfloat16")
    src = controllers(src_pool)
    src.attach_storage_backend("memory", {"store": "rt"})
    src.backup(PROMPT, torch.arange(1, 15))
    src.flush()
    dst_pool = make_pool(seed=None, dtype="bfloat16")
    dst = controllers(dst_pool, write_policy="write_back")
    dst.attach_storage_backend("memory", '{"store": "rt"}')
    assert dst.load(PROMPT, 8, torch.arange(40, 48)) == 8
    assert same_kv(kv_at(dst_pool, torch.arange(40, 48)), kv_at(src_pool, torch.arange(1, 9)))
    assert dst.stats.storage_hits == 2 and dst.stats.host_hits == 0


def test_swa_pool_layers_round_trip_through_the_map(controllers):
    """SWA layers are read and written at translated slots."""

    def swa_pool(seed):
        pool = SWAKVPool(32, 32, PAGE, "float32", 2, 4, swa_attention_layer_ids=[1], full_attention_layer_ids=[0])
        if seed is not None:
            g = torch.Generator().manual_seed(seed)
            for lid in (0, 1):
                for buf in pool.get_kv_buffer(lid):
                    buf.copy_(torch.randn(buf.shape, generator=g))
        return pool

    src_pool, dst_pool = swa_pool(3), swa_pool(None)
    src_pool.full_to_swa_index_mapping[4:12] = torch.arange(20, 28)
    dst_pool.full_to_swa_index_mapping[8:16] = torch.arange(12, 20)
    src, dst = controllers(src_pool), controllers(dst_pool)
    src.attach_storage_backend("memory", {"store": "swa"})
    dst.attach_storage_backend("memory", {"store": "swa"})
    src.backup(PROMPT[:8], torch.arange(4, 12))
    src.flush()
    assert dst.load(PROMPT[:8], 8, torch.arange(8, 16)) == 8
    assert torch.equal(dst_pool.get_key_buffer(1)[12:20], src_pool.get_key_buffer(1)[20:28])
    assert torch.equal(dst_pool.get_value_buffer(0)[8:16], src_pool.get_value_buffer(0)[4:12])


def test_backup_skips_resident_pages_and_honours_start(controllers):
    """A second backup of the same prefix copies nothing; start offsets the device indices."""
    pool = make_pool(seed=4)
    c = controllers(pool)
    assert c.backup(PROMPT[:8], torch.arange(1, 9)) == 2
    assert c.backup(PROMPT[:8], torch.arange(1, 9)) == 0
    assert c.backup(PROMPT, torch.arange(20, 26), start=8) == 1
    assert c.stats.backed_up_pages == 3 and c.lookup(PROMPT) == 12
    assert c.load(PROMPT, 12, torch.arange(40, 44), start=8) == 4
    assert same_kv(kv_at(pool, torch.arange(40, 44)), kv_at(pool, torch.arange(20, 24)))
    assert not same_kv(kv_at(pool, torch.arange(40, 44)), kv_at(pool, torch.arange(5, 9)))
    with pytest.raises(ValueError, match="start must be a non-negative multiple of the page size 4"):
        c.backup(PROMPT, torch.arange(3), start=2)


def test_lookup_stops_at_the_first_gap(controllers):
    """Host pages then storage pages count; a missing page ends the prefix."""
    a = controllers()
    a.attach_storage_backend("memory", {"store": "gap"})
    a.backup(PROMPT[:4], torch.arange(1, 5))
    a.flush()
    b = controllers()
    b.attach_storage_backend("memory", {"store": "gap"})
    b.backup(PROMPT[:8], torch.arange(1, 9))  # pages 0 and 1 in b's host
    assert b.lookup(PROMPT) == 8
    assert b.lookup([1, 2, 3, 4] + PROMPT[4:]) == 0
    assert controllers().lookup(PROMPT) == 0


def test_lookup_and_prefetch_from_a_device_prefix(controllers):
    """With start, counting begins after what the device holds and results are end offsets."""
    a = controllers()
    a.attach_storage_backend("memory", {"store": "start"})
    a.backup(PROMPT, torch.arange(1, 15))
    a.flush()
    b = controllers()
    b.attach_storage_backend("memory", {"store": "start"})
    b.backup(PROMPT[:4], torch.arange(1, 5))
    b.host.remove(b.keys(PROMPT)[0])  # page 0 only on the device now
    assert b.lookup(PROMPT, start=4) == 12
    res = b.prefetch(PROMPT, start=4, policy="wait_complete")
    assert (res.ready_tokens, res.requested_pages, res.fetched_pages) == (12, 2, 2)
    with pytest.raises(ValueError, match="start must be a non-negative multiple"):
        b.lookup(PROMPT, start=3)


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda p: p.write_bytes(p.read_bytes()[:-7]), id="truncated"),
        pytest.param(lambda p: p.write_bytes(_flip(p.read_bytes(), 40)), id="flipped"),
        pytest.param(lambda p: p.write_bytes(b""), id="empty"),
    ],
)
def test_damaged_page_ends_the_prefix_without_raising(controllers, tmp_path, damage):
    """A damaged middle page is skipped and counted; pages before it still load."""
    src = controllers(make_pool(seed=5))
    src.attach_storage_backend("file", {"dir": str(tmp_path)})
    src.backup(PROMPT, torch.arange(1, 15))
    src.close()
    middle = src.keys(PROMPT)[1]
    damage(tmp_path / middle[:2] / f"{middle}.kvpage")

    dst = controllers(make_pool(seed=None))
    dst.attach_storage_backend("file", {"dir": str(tmp_path)})
    res = dst.prefetch(PROMPT, policy="wait_complete")
    assert res.ready_tokens == 4
    assert dst.stats.corrupt_skipped == 1
    assert dst.load(PROMPT, 12, torch.arange(30, 42)) == 4
    assert dst.lookup(PROMPT) == 4  # the damaged file was removed


def test_leftover_temp_file_is_counted_at_attach(controllers, tmp_path):
    """A temp file from a killed writer is counted and never read as a page."""
    src = controllers(make_pool(seed=6))
    src.attach_storage_backend("file", {"dir": str(tmp_path)})
    src.backup(PROMPT[:4], torch.arange(1, 5))
    src.close()
    second = src.keys(PROMPT)[1]
    (tmp_path / second[:2]).mkdir(exist_ok=True)
    (tmp_path / second[:2] / f".{second}.abc.tmp").write_bytes(b"SGKV\x01\x00 torn")
    dst = controllers()
    dst.attach_storage_backend("file", {"dir": str(tmp_path)})
    assert dst.stats.corrupt_skipped == 1
    assert dst.lookup(PROMPT) == 4
    assert dst.prefetch(PROMPT, policy="wait_complete").ready_tokens == 4


def reader_of_stored_pages(controllers: Any, *pool: Any, **kw: Any) -> HiCacheController:
    """A controller on the gated storage, after another one stored PROMPT's 3 full pages there."""
    src = controllers()
    src.attach_storage_backend("gated")
    src.backup(PROMPT, torch.arange(1, 15))
    src.flush()
    dst = controllers(*pool, **kw)
    dst.attach_storage_backend("gated")
    return dst


def test_best_effort_returns_without_waiting(controllers, gated):
    """best_effort reports only what is in host now; the rest arrives in the background."""
    dst = reader_of_stored_pages(controllers, prefetch_policy="best_effort")
    res = dst.prefetch(PROMPT)
    assert (res.ready_tokens, res.requested_pages, res.fetched_pages, res.pending_pages, res.timed_out) == (
        0,
        3,
        0,
        3,
        False,
    )
    assert dst.stats.pending_prefetches == 3
    gated.set()
    assert dst.wait_idle(10)
    assert dst.prefetch(PROMPT).ready_tokens == 12
    assert dst.stats.prefetched_pages == 3


def test_timeout_waits_at_most_the_bound(controllers, gated):
    """timeout gives up after prefetch_timeout_s and says so."""
    dst = reader_of_stored_pages(controllers, prefetch_policy="timeout", prefetch_timeout_s=0.05)
    res = dst.prefetch(PROMPT)
    assert (res.ready_tokens, res.pending_pages, res.timed_out) == (0, 3, True)
    gated.set()
    assert dst.wait_idle(10)
    assert dst.prefetch(PROMPT).timed_out is False


def test_wait_complete_waits_for_every_page(controllers, gated):
    """wait_complete returns once every requested page is in host."""
    dst = reader_of_stored_pages(controllers, prefetch_policy="wait_complete")
    threading.Timer(0.05, gated.set).start()
    res = dst.prefetch(PROMPT)
    assert (res.ready_tokens, res.fetched_pages, res.pending_pages, res.timed_out) == (12, 3, 0, False)


def test_unknown_prefetch_policy_is_refused(controllers):
    """A policy outside the three is a ValueError naming the field."""
    with pytest.raises(
        ValueError, match="'hicache_storage_prefetch_policy' must be one of best_effort, wait_complete, timeout"
    ):
        controllers().prefetch(PROMPT, policy="eager")


def test_write_through_stores_at_backup(controllers):
    """write_through writes every new page to storage at once."""
    c = controllers(write_policy="write_through")
    c.attach_storage_backend("memory")
    c.backup(PROMPT, torch.arange(1, 15))
    c.wait_idle(10)
    assert c.storage_backend.stats.puts == 3 and c.stats.storage_writes == 3


def test_write_back_stores_on_detach(controllers):
    """write_back keeps pages in host until detach flushes them."""
    c = controllers(write_policy="write_back")
    c.attach_storage_backend("memory", {"store": "wb"})
    backend = c.storage_backend
    c.backup(PROMPT, torch.arange(1, 15))
    c.wait_idle(10)
    assert backend.stats.puts == 0
    assert c.detach_storage_backend() is True
    assert backend.stats.puts == 3
    fresh = controllers()
    fresh.attach_storage_backend("memory", {"store": "wb"})
    assert fresh.lookup(PROMPT) == 12


def test_write_back_stores_pages_evicted_from_host(controllers):
    """An unstored page pushed out of a full host pool is written to storage."""
    c = controllers(write_policy="write_back", host_pages=2)
    c.attach_storage_backend("memory")
    c.backup(PROMPT[:8], torch.arange(1, 9))
    c.backup([7] * 8, torch.arange(20, 28))  # two other pages evict both
    c.wait_idle(10)
    assert c.stats.host_evictions == 2
    assert c.storage_backend.stats.puts == 2
    assert c.lookup(PROMPT) == 8


def test_write_through_selective_stores_after_reuse(controllers):
    """write_through_selective stores a page only once it has been loaded back."""
    c = controllers(write_policy="write_through_selective")
    c.attach_storage_backend("memory")
    c.backup(PROMPT[:8], torch.arange(1, 9))
    c.wait_idle(10)
    assert c.storage_backend.stats.puts == 0
    assert c.load(PROMPT, 4, torch.arange(30, 34)) == 4
    c.wait_idle(10)
    assert c.storage_backend.stats.puts == 1


def test_detach_is_idempotent(controllers):
    """A second detach does nothing and says so."""
    c = controllers()
    c.attach_storage_backend("memory")
    assert c.detach_storage_backend() is True
    assert c.detach_storage_backend() is False
    assert c.storage_status().backend is None


def test_prepare_then_abort_leaves_nothing_behind(controllers, tmp_path):
    """An aborted attach removes the directory it created and leaves the controller as it was."""
    c = controllers()
    before = c.storage_status()
    target = tmp_path / "new" / "dir"
    prepared = c.prepare_attach("file", {"dir": str(target)}, write_policy="write_back")
    assert target.is_dir()
    assert c.storage_status() == before
    c.abort_attach(prepared)
    c.abort_attach(prepared)
    assert list(tmp_path.iterdir()) == []
    assert c.storage_status() == before
    with pytest.raises(AttachStateError, match="was already aborted -- prepare a new one"):
        c.commit_attach(prepared)


def test_prepared_attach_commits_once(controllers, tmp_path):
    """Commit applies backend and policies; a second commit or an abort after it is refused."""
    c = controllers()
    prepared = c.prepare_attach("file", {"dir": str(tmp_path)}, prefetch_policy="timeout", write_policy="write_back")
    status = c.commit_attach(prepared)
    assert (status.backend, status.extra_config, status.prefetch_policy, status.write_policy) == (
        "file",
        {"dir": str(tmp_path)},
        "timeout",
        "write_back",
    )
    with pytest.raises(AttachStateError):
        c.commit_attach(prepared)
    with pytest.raises(AttachStateError):
        c.abort_attach(prepared)
    other = controllers()
    with pytest.raises(AttachStateError, match="belongs to another controller"):
        other.commit_attach(c.prepare_attach("memory"))


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("file", {"dir": ""}), "hicache_storage_backend_extra_config.dir"),
        (("nvme", {}), "hicache_storage_backend"),
        (("file", "{not json"), "hicache_storage_backend_extra_config"),
        (("memory", None, "eager"), "hicache_storage_prefetch_policy"),
        (("memory", None, None, "write_sometimes"), "hicache_write_policy"),
    ],
)
def test_failed_attach_changes_nothing(controllers, tmp_path, args, field):
    """A refused attach keeps the attached backend, its policies and the cached pages."""
    c = controllers()
    c.attach_storage_backend("file", {"dir": str(tmp_path / "ok")})
    c.backup(PROMPT, torch.arange(1, 15))
    assert c.wait_idle(10)
    before, backend, stats = c.storage_status(), c.storage_backend, c.stats
    with pytest.raises(StorageAttachError) as exc:
        c.attach_storage_backend(*args)
    assert exc.value.field == field
    assert c.storage_status() == before and c.storage_backend is backend
    assert c.stats == stats
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok"]


def test_reattach_flushes_the_previous_backend(controllers):
    """Attaching over an attached write_back backend stores its pages first."""
    c = controllers(write_policy="write_back")
    c.attach_storage_backend("memory", {"store": "first"})
    first = c.storage_backend
    c.backup(PROMPT, torch.arange(1, 15))
    c.attach_storage_backend("memory", {"store": "second"})
    assert first.stats.puts == 3
    c.flush()
    assert c.storage_backend.stats.puts == 3  # host pages count as unstored for the new backend


def test_attach_and_detach_log_events(controllers):
    """Attach and detach emit one event each, names plus fields."""
    c = controllers()
    with structlog.testing.capture_logs() as logs:
        c.attach_storage_backend("memory", prefetch_policy="wait_complete")
        c.detach_storage_backend()
    events = [e for e in logs if e["event"] in ("hicache.attach", "hicache.detach")]
    assert events == [
        {
            "event": "hicache.attach",
            "log_level": "info",
            "backend": "memory",
            "prefetch_policy": "wait_complete",
            "write_policy": "write_through",
        },
        {"event": "hicache.detach", "log_level": "info", "backend": "memory"},
    ]


def test_host_capacity_follows_ratio_and_size(controllers):
    """Capacity is hicache_ratio x device tokens unless host_pages is given (GB sizing: host pool tests)."""
    assert controllers(hicache_ratio=0.5).host.capacity == 64 // 2 // PAGE
    assert controllers(hicache_ratio=2.0, device_tokens=40).host.capacity == 20
    assert controllers(host_pages=3, hicache_size=1).host.capacity == 3


def test_bad_constructor_policy_is_refused():
    """An unknown write policy fails at construction."""
    with pytest.raises(ValueError, match="'hicache_write_policy' must be one of"):
        HiCacheController(make_pool(), write_policy="sometimes")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_pool_round_trips_through_pinned_host(controllers):
    """With CUDA, host tensors are pinned and device pages round-trip exactly."""
    pool = MHATokenToKVPool(64, PAGE, "bfloat16", 2, 8, layer_ids=LAYERS, device="cuda")
    for lid in LAYERS:
        for buf in pool.get_kv_buffer(lid):
            buf.copy_(torch.randn(buf.shape, device="cuda").bfloat16())
    c = controllers(pool, pin_memory=None)
    assert c.host.pin_memory and c.host.k[0].is_pinned()
    c.backup(PROMPT, torch.arange(1, 15))
    assert c.load(PROMPT, 12, torch.arange(30, 42)) == 12
    torch.cuda.synchronize()
    assert same_kv(kv_at(pool, torch.arange(30, 42).cuda()), kv_at(pool, torch.arange(1, 13).cuda()))


def test_hung_storage_reads_are_misses_after_the_read_timeout(controllers, gated):
    """load and wait_complete wait at most read_timeout_s for a hung read, count it and treat it as a miss."""
    dst = reader_of_stored_pages(
        controllers, make_pool(seed=None), prefetch_policy="wait_complete", read_timeout_s=0.05
    )
    assert dst.lookup(PROMPT) == 12  # existence checks answer; the reads hang
    assert dst.load(PROMPT, 12, torch.arange(30, 42)) == 0
    assert dst.stats.read_timeouts == 1
    res = dst.prefetch(PROMPT)
    assert (res.ready_tokens, res.timed_out) == (0, True)
    assert dst.stats.read_timeouts == 1 + 3
    gated.set()  # the reads land later and serve the next request
    assert dst.wait_idle(10)
    assert dst.load(PROMPT, 12, torch.arange(30, 42)) == 12


class HungLookups(MemoryStorage):
    """A backend whose existence checks hang until a gate opens (a stalled network mount)."""

    gate = threading.Event()

    def _has(self, key: str) -> bool:
        assert self.gate.wait(10), "gate never opened"
        return super()._has(key)


def test_hung_existence_check_is_a_miss_after_the_read_timeout(controllers):
    """lookup and prefetch never wait on a hung tier longer than read_timeout_s."""
    HungLookups.gate = threading.Event()
    register_storage_backend("hung", lambda cfg: HungLookups())
    try:
        ctl = controllers(read_timeout_s=0.05, prefetch_policy="wait_complete")
        ctl.attach_storage_backend("hung")
        assert ctl.lookup(PROMPT) == 0
        assert ctl.prefetch(PROMPT).ready_tokens == 0
        assert ctl.stats.read_timeouts == 2
    finally:
        HungLookups.gate.set()
        STORAGE_BACKENDS.unregister("hung")
