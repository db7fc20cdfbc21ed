"""/generate throughput and latency over loopback, with and without an attached file backend.

Starts one engine and a real uvicorn server in this process, drives it with N concurrent
httpx clients, then attaches a `file` storage backend and measures again, in the same
run. Prints requests/s, p50/p99 latency and the attached/detached ratios; never asserts
absolute times.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

CLIENTS = 8
REQUESTS = 48
KEY = "bench-admin"


def run_load(base: str) -> tuple[float, float, float]:
    prompts = [f"request {i % 12}: the quick brown fox jumps over the lazy dog" for i in range(REQUESTS)]
    latencies: list[float] = []

    def one(p: str) -> None:
        with httpx.Client(timeout=120) as client:
            t = time.perf_counter()
            r = client.post(f"{base}/generate", json={"text": p, "max_new_tokens": 16, "ignore_eos": True})
            r.raise_for_status()
            latencies.append(time.perf_counter() - t)

    start = time.perf_counter()
    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(one, prompts))
    wall = time.perf_counter() - start
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    return REQUESTS / wall, statistics.median(latencies), p99


def main() -> int:
    import socket

    import uvicorn

    from engine.engine import Engine
    from engine.http.app import create_app
    from engine.http.engine_backend import EngineBackend
    from runtime.logs import configure_logging

    configure_logging(level="warning")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    engine = Engine.from_args(
        ["--port", str(port), "--admin-api-key", KEY, "--enable-hierarchical-cache", "--page-size", "4",
         "--max-total-tokens", "4096"]
    )
    server = uvicorn.Server(uvicorn.Config(create_app(EngineBackend(engine)), host="127.0.0.1", port=port, log_config=None,
                                           access_log=False, lifespan="off"))
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    while not server.started:
        time.sleep(0.05)
    try:
        run_load(base)  # warm-up
        plain = run_load(base)
        with tempfile.TemporaryDirectory() as d:
            r = httpx.put(f"{base}/hicache/storage-backend", headers={"Authorization": f"Bearer {KEY}"},
                          json={"hicache_storage_backend": "file", "hicache_storage_backend_extra_config_json": f'{{"dir": "{d}"}}'})
            r.raise_for_status()
            attached = run_load(base)
            httpx.delete(f"{base}/hicache/storage-backend", headers={"Authorization": f"Bearer {KEY}"}).raise_for_status()
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        engine.shutdown()
    print(f"clients={CLIENTS} requests={REQUESTS} max_new_tokens=16")
    for name, (rps, p50, p99) in (("no storage", plain), ("file backend", attached)):
        print(f"{name:>13}: {rps:7.2f} req/s  p50 {p50 * 1000:7.1f} ms  p99 {p99 * 1000:7.1f} ms")
    print(f"ratio file/no-storage: throughput x{attached[0] / plain[0]:.3f}  p50 x{attached[1] / plain[1]:.3f}"
          f"  p99 x{attached[2] / plain[2]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
