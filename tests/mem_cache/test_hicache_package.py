"""The hicache front door, its independence from configuration, and concurrent use."""

from __future__ import annotations

import ast
import importlib
import pathlib
import threading

import torch

import mem_cache.hicache as hicache
from mem_cache.hicache import HiCacheController
from mem_cache.pools import MHATokenToKVPool

PACKAGE_DIR = pathlib.Path(hicache.__file__).parent


def test_every_public_name_imports_and_all_is_sorted():
    """`__all__` is sorted (tests/test_facades.py checks each name is its module's object)."""
    module = importlib.import_module("mem_cache.hicache")
    assert module.__all__ == sorted(module.__all__, key=lambda n: (not n.isupper(), n))


def test_package_reads_no_configuration():
    """No hicache module imports the runtime context or the raw record: values come in as arguments."""
    offenders = []
    for path in sorted(PACKAGE_DIR.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "runtime":
                offenders.append(f"{path.name}: from {node.module}")
            if isinstance(node, ast.Import):
                offenders += [f"{path.name}: import {a.name}" for a in node.names if a.name.split(".")[0] == "runtime"]
            if isinstance(node, ast.Name) and node.id in ("get_server_args", "ServerArgs"):
                offenders.append(f"{path.name}: {node.id}")
    assert offenders == []


def test_concurrent_traffic_and_attach_detach_stay_consistent():
    """Backups, prefetches and loads racing attach/detach raise nothing and end in a known state."""
    pool = MHATokenToKVPool(256, 4, "float32", 2, 8, layer_ids=(0, 1))
    for lid in (0, 1):
        for buf in pool.get_kv_buffer(lid):
            buf.copy_(torch.randn(buf.shape, generator=torch.Generator().manual_seed(lid)))
    c = HiCacheController(pool, host_pages=12, write_policy="write_back", pin_memory=False)
    errors: list[BaseException] = []
    stop = threading.Event()

    def traffic(seed: int) -> None:
        try:
            i = 0
            while not stop.is_set() and i < 25:
                ids = [seed, i % 5] + list(range(14))
                c.backup(ids, torch.arange(1, 17))
                c.prefetch(ids, policy="wait_complete")
                got = c.load(ids, 16, torch.arange(100 + 16 * seed, 116 + 16 * seed))
                assert got % 4 == 0
                i += 1
        except BaseException as exc:  # collected for the main thread
            errors.append(exc)

    threads = [threading.Thread(target=traffic, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    for _ in range(10):
        c.attach_storage_backend("memory", {"store": "race"})
        c.detach_storage_backend()
    c.attach_storage_backend("memory", {"store": "race"})
    stop.set()
    for t in threads:
        t.join(30)
    assert errors == []
    assert c.wait_idle(10)
    s = c.stats
    assert s.storage_backend == "memory" and s.host_pages <= 12 and s.write_errors == 0
    c.close()
    assert c.stats.storage_backend is None
