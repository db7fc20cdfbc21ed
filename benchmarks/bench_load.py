"""Load + resolve a full record from a config file, env vars and CLI flags, next to building it with attrs.

Both are measured in this one run; the ratio is what to watch, not the absolute times.
Run: .venv/bin/python benchmarks/bench_load.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from sgconf import ServerArgs, load, record_to_dict, resolve_once

CONFIG = """
[schedule]
max_running_requests = 64
chunked_prefill_size = 4096
schedule_policy = "lpm"

[memory]
enable_hierarchical_cache = true
hicache_ratio = 3.0
hicache_storage_backend_extra_config = { dir = "/tmp/hicache" }

[exec.kernel]
attention_backend = "torch_native"
"""
ENV = {"SGCONF_TP_SIZE": "4", "SGCONF_DP_SIZE": "2", "SGCONF_ENABLE_DP_ATTENTION": "true", "SGCONF_LOG_LEVEL": "debug"}
ARGV = ["--page-size", "16", "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--port", "31000"]


def best_of(fn, repeat: int, number: int) -> float:
    """Seconds per call, the best of `repeat` rounds of `number` calls (least disturbed by other load)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "app.toml"
        cfg.write_text(CONFIG)

        def layered() -> None:
            resolve_once(load(ARGV, env=ENV, config_file=cfg).record)

        values = record_to_dict(resolve_once(load(ARGV, env=ENV, config_file=cfg).record).values)

        def direct() -> None:
            ServerArgs(**values)

        t_load = best_of(layered, repeat=5, number=40)
        t_direct = best_of(direct, repeat=5, number=2000)
    print(f"load+resolve (file+env+cli): {t_load * 1e6:10.1f} us/record")
    print(f"ServerArgs(**values)       : {t_direct * 1e6:10.1f} us/record")
    print(f"ratio load+resolve / direct: {t_load / t_direct:10.1f}x")


if __name__ == "__main__":
    main()
