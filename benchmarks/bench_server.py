"""/generate throughput and latency over loopback, with and without an attached file backend.

Starts one engine and a real uvicorn server in this process, drives it with N concurrent
httpx clients, then attaches a `file` storage backend and measures again, in the same
run. Prints requests/s, p50/p99 latency and the attached/detached ratios; never asserts
absolute times.

It also measures the edge limits (body size, JSON depth and integer size, field ranges)
against a run where bodies are read and parsed with plain `json.loads` (limits off),
alternating on and off rounds so drift hits both, and the p99 latency of good requests
while one more client sends only bad bodies (deep nesting, oversized, NaN, bad UTF-8).

Fairness: the p99 latency of a light client (400 short requests one at a time) while two
other clients send fan-out batches (`/generate` with a list of texts; every client is a
process of its own, as a server's clients are), as a ratio of its p99 alone (goal <= 2x;
the median of three alternating rounds, each printed, with the p50 ratio beside it),
against the engine in this process and against a two-replica group (`--dp-size 2`, each
replica a process); and the time until KV use is back to idle after 20 streams are
dropped by their clients after the first event (goal <= 1 s).
"""

from __future__ import annotations

import contextlib
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

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


BAD_BODIES = [
    b"[" * 5000 + b"]" * 5000,
    b'{"text": "a", "seed": ' + b"9" * 5000 + b"}",
    b'{"text": "a", "temperature": NaN}',
    b'{"text": "\xff\xfe"}',
    b'{"text": "' + b"x" * (8 << 20) + b'"}',
]


@contextlib.contextmanager
def limits_off() -> Iterator[None]:
    """Bodies read whole and parsed with plain json.loads: the baseline the limits are measured against."""
    from engine.http import bodies

    saved = bodies.read_body, bodies.parse_json

    async def read_all(request, limits):  # type: ignore[no-untyped-def]
        return await request.body()

    bodies.read_body, bodies.parse_json = read_all, lambda raw, limits: json.loads(raw)
    try:
        yield
    finally:
        bodies.read_body, bodies.parse_json = saved


def run_under_attack(base: str) -> tuple[tuple[float, float, float], int]:
    """Good load while one extra client sends only bad bodies; returns the good load's numbers and bad answers sent."""
    stop = threading.Event()
    answered: list[int] = []

    def attacker() -> None:
        with httpx.Client(timeout=120) as client:
            i = 0
            while not stop.is_set():
                r = client.post(
                    f"{base}/generate",
                    content=BAD_BODIES[i % len(BAD_BODIES)],
                    headers={"content-type": "application/json"},
                )
                assert r.status_code < 500, r.text
                answered.append(r.status_code)
                i += 1

    thread = threading.Thread(target=attacker, daemon=True)
    thread.start()
    try:
        good = run_load(base)
    finally:
        stop.set()
        thread.join(timeout=120)
    return good, len(answered)


LIGHT_REQUESTS = 400  # a p99 of the 4th slowest: one hiccup of a busy machine does not make it
FAN_OUT_ITEMS = 200
DROPPED_STREAMS = 20


LIGHT_CLIENT = """
import sys, time, httpx
base, n = sys.argv[1], int(sys.argv[2])
latencies = []
with httpx.Client(timeout=300) as client:
    for i in range(n):
        t = time.perf_counter()
        r = client.post(f"{base}/generate", json={"text": f"light {i}", "max_new_tokens": 4, "ignore_eos": True})
        r.raise_for_status()
        latencies.append(time.perf_counter() - t)
latencies.sort()
print(latencies[len(latencies) // 2], latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))])
"""


def light_client(base: str) -> tuple[float, float]:
    """p50 and p99 latency of one client sending short requests one after the other, from a process of its own.

    A client never shares the server's interpreter: in this process its own HTTP work
    would wait for the interpreter lock behind the server's, and count that in its latency.
    """
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", LIGHT_CLIENT, base, str(LIGHT_REQUESTS)], capture_output=True, text=True, check=True
    )
    p50, p99 = out.stdout.split()
    return float(p50), float(p99)


FAN_OUT_CLIENT = """
import sys, httpx
base, items = sys.argv[1], int(sys.argv[2])
with httpx.Client(timeout=300) as client:
    while True:
        client.post(f"{base}/generate", json={"text": ["x"] * items, "max_new_tokens": 1}).raise_for_status()
        print("sent", flush=True)
"""


def light_under_fan_out(base: str) -> tuple[tuple[float, float], int]:
    """The light client's p50 and p99 while two other clients keep sending fan-out batches; returns it and the batches sent.

    The fan-out clients are processes of their own, as a client of a server is: in this
    process their JSON work would take the interpreter lock from the server's scheduler,
    a cost no real client puts on a server.
    """
    import subprocess

    clients = [
        subprocess.Popen(
            [sys.executable, "-c", FAN_OUT_CLIENT, base, str(FAN_OUT_ITEMS)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    sent: list[int] = []

    def count(proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for _ in proc.stdout:
            sent.append(1)

    readers = [threading.Thread(target=count, args=(c,), daemon=True) for c in clients]
    for t in readers:
        t.start()
    while len(sent) < len(clients):  # measure once every fan-out client is really running
        time.sleep(0.01)
    try:
        return light_client(base), len(sent)
    finally:
        for c in clients:
            c.kill()
            c.wait(timeout=60)


FAIRNESS_ROUNDS = 3


Rounds = list[tuple[tuple[float, float], tuple[float, float], int]]


def fairness_rounds(base: str, idle: Any = None, steps: Any = None) -> tuple[Rounds, tuple[float, float]]:
    """`FAIRNESS_ROUNDS` rounds of (light alone, light beside the fan-out, batches sent), alone and crowded alternating.

    A p99 of 400 requests is their fourth slowest, so one round's ratio still swings with the
    machine's own hiccups; alternating rounds let drift land on both sides, and the
    median of the rounds' ratios is the figure. `idle()` returns once the fan-out
    clients' last batches have left the server; `steps()` is the engine's step count, from
    which the mean steps per light request alone and beside the fan-out are returned
    (zeros without it).
    """
    rounds: Rounds = []
    counted = [0, 0]
    for _ in range(FAIRNESS_ROUNDS):
        before = steps() if steps is not None else 0
        alone = light_client(base)
        middle = steps() if steps is not None else 0
        crowded, batches = light_under_fan_out(base)
        after = steps() if steps is not None else 0
        counted[0] += middle - before
        counted[1] += after - middle
        if idle is not None:
            idle()
        rounds.append((alone, crowded, batches))
    per_request = FAIRNESS_ROUNDS * LIGHT_REQUESTS
    return rounds, (counted[0] / per_request, counted[1] / per_request)


def print_fairness(label: str, rounds: Rounds) -> None:
    for i, ((a50, a99), (c50, c99), batches) in enumerate(rounds, 1):
        print(
            f"  round {i}: p99 {c99 * 1000:7.1f} ms beside {batches} fan-out batches of {FAN_OUT_ITEMS}"
            f" vs {a99 * 1000:7.1f} ms alone (x{c99 / a99:.2f}); p50 {c50 * 1000:6.1f} vs {a50 * 1000:6.1f} ms"
            f" (x{c50 / a50:.2f})"
        )
    p99 = statistics.median(c[1] / a[1] for a, c, _ in rounds)
    p50 = statistics.median(c[0] / a[0] for a, c, _ in rounds)
    print(
        f"{label}: light client p99 ratio x{p99:.3f} (goal <= 2), p50 ratio x{p50:.3f}, median of {len(rounds)} rounds"
    )


def dropped_streams(base: str, engine: object) -> tuple[float, int]:
    """Seconds from the last of 20 dropped streams until the engine holds no request and KV use is idle again,
    and how many of them were cancelled (rather than run to their end)."""
    import socket as socketlib

    host, port = base.removeprefix("http://").split(":")
    idle = engine.memory.allocator.available_size()  # type: ignore[attr-defined]
    cancelled = engine.scheduler.counters["cancelled"]  # type: ignore[attr-defined]
    socks = []
    for i in range(DROPPED_STREAMS):
        raw = json.dumps({"text": f"dropped {i}", "max_new_tokens": 300, "ignore_eos": True, "stream": True}).encode()
        sock = socketlib.create_connection((host, int(port)), timeout=120)
        sock.sendall(
            b"POST /generate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(raw)}\r\n\r\n".encode()
            + raw
        )
        socks.append(sock)
    for sock in socks:  # every stream has begun: its first event arrived
        got = b""
        while b"data: " not in got:
            got += sock.recv(65536)
    for sock in socks:
        sock.close()
    closed = time.perf_counter()
    while engine.busy_counts() != (0, 0) or engine.memory.allocator.available_size() < idle:  # type: ignore[attr-defined]
        if time.perf_counter() - closed > 300:
            raise RuntimeError("KV use did not return to idle within 300 s of the streams being dropped")
        time.sleep(0.005)
    return time.perf_counter() - closed, engine.scheduler.counters["cancelled"] - cancelled  # type: ignore[attr-defined]


def main() -> int:
    from engine.engine import Engine, freeze_start_up_heap
    from engine.http.app import create_app
    from engine.http.engine_backend import EngineBackend
    from engine.http.listeners import bind, uvicorn_server
    from runtime.logs import configure_logging

    configure_logging(level="warning")
    sock = bind("bench", "127.0.0.1", 0, flag="--port")
    port = sock.getsockname()[1]
    engine = Engine.from_args(
        [
            "--port",
            str(port),
            "--admin-api-key",
            KEY,
            "--enable-hierarchical-cache",
            "--page-size",
            "4",
            "--max-total-tokens",
            "4096",
        ]
    )
    app = create_app(EngineBackend(engine))
    freeze_start_up_heap()  # as `sgconf serve` does before it listens
    server = uvicorn_server(app, grace_s=0)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    while not server.started:
        time.sleep(0.05)
    try:
        run_load(base)  # warm-up
        plain = run_load(base)
        with tempfile.TemporaryDirectory() as d:
            r = httpx.put(
                f"{base}/hicache/storage-backend",
                headers={"Authorization": f"Bearer {KEY}"},
                json={
                    "hicache_storage_backend": "file",
                    "hicache_storage_backend_extra_config_json": f'{{"dir": "{d}"}}',
                },
            )
            r.raise_for_status()
            attached = run_load(base)
            httpx.delete(
                f"{base}/hicache/storage-backend", headers={"Authorization": f"Bearer {KEY}"}
            ).raise_for_status()
        rounds_on, rounds_off = [], []
        for _ in range(2):  # alternate, so drift of a busy machine lands on both sides
            rounds_on.append(run_load(base))
            with limits_off():
                rounds_off.append(run_load(base))
        attacked, bad_sent = run_under_attack(base)

        def idle() -> None:
            while engine.busy_counts() != (0, 0):  # the fan-out clients' last batches leave before the next figure
                time.sleep(0.01)

        fair, (steps_alone, steps_crowded) = fairness_rounds(base, idle, lambda: engine.scheduler.counters["steps"])
        recovery, cancelled = dropped_streams(base, engine)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        engine.shutdown()
    print(f"clients={CLIENTS} requests={REQUESTS} max_new_tokens=16")
    for name, (rps, p50, p99) in (("no storage", plain), ("file backend", attached)):
        print(f"{name:>13}: {rps:7.2f} req/s  p50 {p50 * 1000:7.1f} ms  p99 {p99 * 1000:7.1f} ms")
    print(
        f"ratio file/no-storage: throughput x{attached[0] / plain[0]:.3f}  p50 x{attached[1] / plain[1]:.3f}"
        f"  p99 x{attached[2] / plain[2]:.3f}"
    )
    on = statistics.mean(r[0] for r in rounds_on)
    off = statistics.mean(r[0] for r in rounds_off)
    print(f"   limits on: {on:7.2f} req/s   limits off: {off:7.2f} req/s   ratio on/off x{on / off:.3f} (goal >= 0.95)")
    quiet_p99 = statistics.mean(r[2] for r in rounds_on)
    print(
        f"under attack ({bad_sent} bad bodies answered 4xx): good p99 {attacked[2] * 1000:7.1f} ms"
        f"  vs quiet p99 {quiet_p99 * 1000:7.1f} ms  ratio x{attacked[2] / quiet_p99:.3f}"
    )
    print_fairness("fairness, one engine", fair)
    print(
        f"          engine steps per light request: {steps_crowded:.1f} beside the fan-out vs {steps_alone:.1f} alone"
        " (the rest of the ratio: the steps carry the batch's fair_unit_rows items, and the server's HTTP work"
        " for the batches shares one interpreter with the scheduler)"
    )
    print(
        f"dropped streams: KV back to idle {recovery:.3f} s after {DROPPED_STREAMS} streams of 300 tokens were dropped"
        f" after their first event, {cancelled} cancelled (goal <= 1 s)"
    )
    print_fairness("fairness, replica group (--dp-size 2)", group_fairness())
    return 0


def group_fairness() -> Rounds:
    """The fairness rounds against a two-replica group (each replica a process).

    A batch crosses to one replica as one unit of work, so that replica holds it to its
    share of rows as one engine does.
    """
    from engine.dp.controller import ROLE, DPController
    from engine.dp.group_backend import ReplicaGroupBackend
    from engine.http.app import create_app
    from engine.http.listeners import bind, uvicorn_server
    from runtime import publish, reset
    from sgconf import SERVING

    sock = bind("bench", "127.0.0.1", 0, flag="--port")
    port = sock.getsockname()[1]
    argv = ["--port", str(port), "--dp-size", "2", "--page-size", "4", "--max-total-tokens", "4096"]
    publish(SERVING.load(argv).record, role=ROLE)
    controller = DPController()
    server = uvicorn_server(create_app(ReplicaGroupBackend(controller)), grace_s=0)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        while not server.started:
            time.sleep(0.05)
        run_load(base)  # warm-up: both replicas compile their first steps
        return fairness_rounds(base)[0]
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        controller.shutdown()
        reset()


if __name__ == "__main__":
    sys.exit(main())
