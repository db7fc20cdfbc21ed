"""What authenticating storage pages costs: the page codec and engine throughput, MAC on vs off, in one run.

0. The file backend's raw read of a page (shard and file opened without following
   links, relative to the resolved root, the read bounded by the page size) against
   a plain `Path.read_bytes` of the same files, the way pages were read before.

1. The codec alone: encode + decode of one page, HMAC-SHA256 vs CRC only, for a
   small and a large page.
2. The engine: requests whose prefixes are written to a `file` backend (fresh engine,
   write_through), then served again by a second fresh engine that must read every
   page back from storage (wait_complete), so both the signing and the checking are on
   the measured path. "MAC off" swaps the attached backend's codec for the
   unauthenticated one; nothing else differs. Rounds alternate on/off so drift on a
   busy machine hits both alike. Prints ratios (goal: MAC on >= 95% of off); never
   asserts absolute times.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

PROMPTS = [f"prompt {i}: " + "the storage tier keeps every page of this long shared prefix. " * 6 for i in range(12)]
ROUNDS = 3


def codec_ratio(size: int, n: int) -> tuple[float, float]:
    from mem_cache.hicache import PageCodec

    payload = bytes(range(256)) * (size // 256)
    key = "ab" * 32
    on, off = PageCodec(bytes(range(32))), PageCodec.unauthenticated()
    times = {}
    for name, codec in (("on", on), ("off", off), ("on", on), ("off", off)):
        t = time.perf_counter()
        for _ in range(n):
            codec.decode(key, codec.encode(key, payload))
        times.setdefault(name, []).append(time.perf_counter() - t)
    return n / min(times["on"]), n / min(times["off"])


def raw_read_ratio(size: int, n: int) -> tuple[float, float]:
    """Pages per second: the file backend's safe `_read` vs `Path.read_bytes` of the same page files."""
    from mem_cache.hicache import create_storage_backend

    with tempfile.TemporaryDirectory() as d:
        backend = create_storage_backend("file", {"dir": d, "fsync": False})
        backend.bound_pages(size)
        keys = [f"{i:02x}" + "0" * 62 for i in range(64)]
        for key in keys:
            backend.put(key, bytes(size))
        paths = [backend.path_for(key) for key in keys]
        times: dict[str, list[float]] = {}
        for name in ("safe", "plain", "safe", "plain"):
            t = time.perf_counter()
            for i in range(n):
                if name == "safe":
                    backend._read(keys[i % 64])
                else:
                    paths[i % 64].read_bytes()
            times.setdefault(name, []).append(time.perf_counter() - t)
        backend.close()
    return n / min(times["safe"]), n / min(times["plain"])


def engine_round(mac: bool, root: Path) -> tuple[float, float, int]:
    from engine.engine import Engine
    from mem_cache.hicache import PageCodec

    def start() -> Engine:
        engine = Engine.from_args(["--enable-hierarchical-cache", "--page-size", "4", "--max-total-tokens", "4096"])
        engine.attach_storage_backend(
            "file", extra_config={"dir": str(root), "fsync": False}, prefetch_policy="wait_complete"
        )
        backend = engine.hicache.controller.storage_backend
        if not mac:
            backend.codec = PageCodec.unauthenticated()
        return engine

    def serve(engine: Engine) -> float:
        t = time.perf_counter()
        for p in PROMPTS:
            engine.generate(p, max_new_tokens=8, ignore_eos=True)
        engine.hicache.controller.flush()
        return len(PROMPTS) / (time.perf_counter() - t)

    writer = start()
    try:
        write_rps = serve(writer)
    finally:
        writer.shutdown()
    reader = start()
    try:
        read_rps = serve(reader)
        hits = reader.stats()["hicache"]["storage_hits"]
    finally:
        reader.shutdown()
    return write_rps, read_rps, hits


def main() -> int:
    from runtime.logs import configure_logging

    configure_logging(level="warning")
    for size, n in ((16 << 10, 5000), (256 << 10, 1000)):
        safe, plain = raw_read_ratio(size, n)
        print(
            f"raw read {size >> 10:>4} KiB page: safe {safe:9.0f} pages/s, plain {plain:9.0f} pages/s,"
            f" safe/plain x{safe / plain:.3f}"
        )
    for size, n in ((16 << 10, 3000), (256 << 10, 300)):
        on, off = codec_ratio(size, n)
        print(
            f"codec {size >> 10:>4} KiB page: MAC on {on:9.0f} pages/s, off {off:9.0f} pages/s, on/off x{on / off:.3f}"
        )
    results: dict[bool, list[tuple[float, float, int]]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as d:
        engine_round(True, Path(d) / "warmup")
        for i in range(ROUNDS):
            for mac in (True, False) if i % 2 == 0 else (False, True):
                results[mac].append(engine_round(mac, Path(d) / f"r{i}-{mac}"))
    print(f"engine: {len(PROMPTS)} requests per phase, {ROUNDS} rounds each, medians")
    med = {
        mac: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs)) for mac, rs in results.items()
    }
    hits = {mac: min(r[2] for r in rs) for mac, rs in results.items()}
    for mac in (True, False):
        w, r = med[mac]
        print(
            f"  MAC {'on ' if mac else 'off'}: store {w:6.2f} req/s, read back {r:6.2f} req/s (pages from storage >= {hits[mac]})"
        )
    print(f"ratio MAC on/off: store x{med[True][0] / med[False][0]:.3f}, read back x{med[True][1] / med[False][1]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
