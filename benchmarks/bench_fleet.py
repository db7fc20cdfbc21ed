"""Time from `fleet set` until every server of the fleet ACKs, for 1, 2, 4 and 8 servers, in one run.

One etcd on loopback, then `sgconf serve --fleet bench` members added 1 -> 2 -> 4 -> 8.
For each size, WARMUP + ROUNDS versions are published (a hot field alternating between values,
so every version changes something on every server) and the time is taken from just
before the compare-and-swap write until a watch on the status keys has seen an ACK of
that version from every member. etcd keeps its data in /dev/shm when there is one, so a
shared machine's disk stalls do not pass for fleet latency. Prints p50, p99 and max per size and the p99 ratio to
the single server measured in the same run (goal: at most 2x at 8 servers). Needs the
etcd binary (`make etcd`).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from engine.fleet.records import Keys, ServerStatus, decode
from engine.fleet.store import FleetStore

ROUNDS = 100
WARMUP = 5  # first versions after servers join: connections and caches warm up, not counted
SIZES = (1, 2, 4, 8)
FLEET = "bench"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(what: str, check, timeout_s: float = 300.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench_fleet: timed out waiting for {what}")
        time.sleep(0.1)


def healthy(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def start_etcd(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("etcd")
    if binary is None:
        raise SystemExit("bench_fleet: the etcd binary is not installed -- run 'make etcd'")
    cport, pport = free_port(), free_port()
    client, peer = f"http://127.0.0.1:{cport}", f"http://127.0.0.1:{pport}"
    proc = subprocess.Popen([binary, "--name", "b", "--data-dir", str(workdir / "etcd"), "--listen-client-urls", client,
                             "--advertise-client-urls", client, "--listen-peer-urls", peer,
                             "--initial-advertise-peer-urls", peer, "--initial-cluster", f"b={peer}", "--log-level", "error"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait("etcd", lambda: healthy(f"{client}/health"))
    return proc, f"etcd://127.0.0.1:{cport}"


def start_server(store: str, index: int) -> subprocess.Popen[bytes]:
    port = free_port()
    cmd = [sys.executable, "-m", "sgconf", "serve", "--port", str(port), "--fleet", FLEET, "--fleet-store", store,
           "--fleet-server-id", f"s{index}", "--max-total-tokens", "1024", "--log-level", "warning"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONWARNINGS": "ignore"})
    proc.base = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    return proc


async def rounds(store_url: str, members: int, first_value: int) -> list[float]:
    """Seconds from publish to the last ACK, one per round."""
    keys = Keys(FLEET)
    out = []
    async with FleetStore(store_url, timeout_s=10) as store:
        client = store._client
        for i in range(WARMUP + ROUNDS):
            value = first_value + i % 2 + 1  # 2, 3, 2, 3, ...: always a change
            _, _, revision = await store.desired(FLEET)
            watch = await client.watch_prefix(keys.status_prefix.encode(), start_revision=revision + 1)
            start = time.perf_counter()
            desired = await store.publish(FLEET, {"stream_interval": value})
            acked: set[str] = set()
            async for event in watch:
                status = decode(event.kv.value, ServerStatus, key=event.kv.key.decode())
                if status.version == desired.version and status.state == "ack":
                    acked.add(status.server)
                elif status.version == desired.version and status.state == "nack":
                    raise SystemExit(f"bench_fleet: {status.server} refused version {desired.version}: {status.reason}")
                if len(acked) == members:
                    break
            out.append(time.perf_counter() - start)
            await watch.cancel()
    return out[WARMUP:]


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    # etcd's data in memory when the machine has /dev/shm: a shared VM's fsync stalls are not what this measures
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="bench-fleet-", dir=shm) as tmp:
        etcd, store = start_etcd(Path(tmp))
        servers: list[subprocess.Popen[bytes]] = []
        results: dict[int, list[float]] = {}
        try:
            for size in SIZES:
                new = [start_server(store, len(servers) + k) for k in range(size - len(servers))]
                servers += new
                for proc in new:
                    wait("a server", lambda proc=proc: healthy(f"{proc.base}/health"))  # type: ignore[attr-defined]
                results[size] = asyncio.run(rounds(store, size, 0))
        finally:
            for proc in servers:
                proc.terminate()
            for proc in servers:
                proc.wait(timeout=120)
            etcd.terminate()
            etcd.wait(timeout=30)
    base, base50 = p(results[SIZES[0]], 0.99), statistics.median(results[SIZES[0]])
    print(f"fleet set -> every server ACKs ({ROUNDS} versions per size, one etcd on loopback, data in {shm or 'a temp dir'},"
          f" {os.cpu_count()} cores)")
    print(f"{'servers':>7}  {'p50 ms':>8}  {'p99 ms':>8}  {'max ms':>8}  {'p50 / 1 server':>14}  {'p99 / 1 server':>14}")
    for size, times in results.items():
        print(f"{size:>7}  {statistics.median(times) * 1e3:8.1f}  {p(times, 0.99) * 1e3:8.1f}  {max(times) * 1e3:8.1f}"
              f"  {statistics.median(times) / base50:14.2f}  {p(times, 0.99) / base:14.2f}")
    ratio = p(results[SIZES[-1]], 0.99) / base
    print(f"goal p99 at {SIZES[-1]} servers <= 2.00x one server: {ratio:.2f}x ({'met' if ratio <= 2 else 'missed'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
