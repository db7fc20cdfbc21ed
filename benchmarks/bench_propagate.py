"""Median latency of one propagated override for 1, 2 and 4 ranks on loopback, as a ratio to a local `override()`.

Rank 0 runs here; the other ranks are this script started again as followers. Every
rank publishes the same defaults; each round flips a hot field, so every round commits.
Prints medians side by side from one run; never gates on absolute times.
"""

from __future__ import annotations

import datetime
import socket
import statistics
import subprocess
import sys
import time

ROUNDS = 200
VALUES = ("fcfs", "lpm")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _init(rank: int, size: int, port: int) -> None:
    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=size,
        timeout=datetime.timedelta(seconds=60),
    )


def follower(rank: int, size: int, port: int) -> None:
    from runtime import publish
    from runtime.distributed import ConfigGroup
    from sgconf import ServerArgs

    _init(rank, size, port)
    publish(ServerArgs(), role="scheduler")
    group = ConfigGroup(None, rank, size)
    group.start()
    group.join()


def median_us(step, rounds: int = ROUNDS) -> float:
    times = []
    for i in range(rounds):
        start = time.perf_counter()
        step(VALUES[i % 2])
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def measure(size: int) -> float:
    from runtime import publish, reset
    from runtime.distributed import ConfigGroup
    from sgconf import ServerArgs

    port = _free_port()
    procs = [
        subprocess.Popen([sys.executable, __file__, "follower", str(r), str(size), str(port)]) for r in range(1, size)
    ]
    try:
        if size > 1:
            _init(0, size, port)
        publish(ServerArgs(), role="scheduler")
        group = ConfigGroup(None, 0, size, timeout_s=30.0)
        median_us(lambda v: group.propagate("bench", schedule_policy=v), 20)  # warm-up
        result = median_us(lambda v: group.propagate("bench", schedule_policy=v))
        group.close()
        return result
    finally:
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        if size > 1:
            import torch.distributed as dist

            dist.destroy_process_group()
        reset()


def main() -> None:
    import structlog

    from runtime import get_context, publish, reset
    from sgconf import ServerArgs

    structlog.configure(processors=[], logger_factory=structlog.ReturnLoggerFactory())  # measure work, not printing
    publish(ServerArgs(), role="scheduler")
    ctx = get_context()
    local = median_us(lambda v: ctx.override("bench", schedule_policy=v))
    reset()
    print(f"local override():   median {local:9.1f} us   ratio 1.0")
    for size in (1, 2, 4):
        us = measure(size)
        print(f"propagate, {size} rank{'s' if size > 1 else ' '}: median {us:9.1f} us   ratio {us / local:.1f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["follower"]:
        import structlog

        structlog.configure(processors=[], logger_factory=structlog.ReturnLoggerFactory())
        follower(*(int(a) for a in sys.argv[2:5]))
    else:
        main()
