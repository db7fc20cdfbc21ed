"""Time from `fleet set` until every server of the fleet ACKs, for 1, 2, 4 and 8 servers, in one run.

One etcd on loopback, one server alone in fleet `bench-solo`, and `sgconf serve --fleet
bench` members added 1 -> 2 -> 4 -> 8. For each size, WARMUP + ROUNDS versions are
published to each fleet in turn (a hot field alternating between values, so every
version changes something on every server), and each is timed from just before the
compare-and-swap write until a watch on the status keys has seen an ACK of that version
from every member. The single-server figure is thus measured beside every size, under
the same load of the machine. etcd keeps its data in /dev/shm when there is one, so a
shared machine's disk stalls do not pass for fleet latency. Prints p50, p99 and max per
size and the ratios to the single server measured beside it (goal: p99 at most 2x at 8
servers). Needs the etcd binary (`make etcd`). On a machine with fewer cores than
servers the members apply each version in turn, not at once, so the ratios there
show the CPU they share as much as the fan-out.

Then the multi-node replica group: one `POST /config/overrides` (the two-phase round
over every rank) timed on a group of 2 nodes x 2 replicas (two `sgconf serve` trees
on loopback, `--nnodes 2`), beside one node with 2 replicas and one node with 4 (the
same number of ranks), the three taking turns round by round. Prints p50 and p99 and
the ratios of the 2-node group to each one-node group.
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
SOLO = "bench-solo"  # one server of its own: the single-server figure, measured beside each size


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
    proc = subprocess.Popen(
        [
            binary,
            "--name",
            "b",
            "--data-dir",
            str(workdir / "etcd"),
            "--listen-client-urls",
            client,
            "--advertise-client-urls",
            client,
            "--listen-peer-urls",
            peer,
            "--initial-advertise-peer-urls",
            peer,
            "--initial-cluster",
            f"b={peer}",
            "--log-level",
            "error",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait("etcd", lambda: healthy(f"{client}/health"))
    return proc, f"etcd://127.0.0.1:{cport}"


def start_server(store: str, index: int, fleet: str = FLEET) -> subprocess.Popen[bytes]:
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "sgconf",
        "serve",
        "--port",
        str(port),
        "--fleet",
        fleet,
        "--fleet-store",
        store,
        "--fleet-server-id",
        f"s{index}",
        "--max-total-tokens",
        "1024",
        "--log-level",
        "warning",
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONWARNINGS": "ignore"}
    )
    proc.base = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    return proc


async def one_version(store: FleetStore, fleet: str, members: int, value: int) -> float:
    """Seconds from publishing `stream_interval=value` to `fleet` until all `members` ACKed it."""
    _, _, revision = await store.desired(fleet)
    watch = await store._client.watch_prefix(Keys(fleet).status_prefix.encode(), start_revision=revision + 1)
    start = time.perf_counter()
    desired = await store.publish(fleet, {"stream_interval": value})
    acked: set[str] = set()
    async for event in watch:
        status = decode(event.kv.value, ServerStatus, key=event.kv.key.decode())
        if status.version == desired.version and status.state == "nack":
            raise SystemExit(f"bench_fleet: {status.server} refused version {desired.version}: {status.reason}")
        if status.version == desired.version and status.state == "ack":
            acked.add(status.server)
        if len(acked) == members:
            break
    took = time.perf_counter() - start
    await watch.cancel()
    return took


async def block(store_url: str, members: int) -> tuple[list[float], list[float]]:
    """(the fleet of `members`, the single server) times, one version each in turn, so both see the same machine."""
    fleet, solo = [], []
    async with FleetStore(store_url, timeout_s=10) as store:
        for i in range(WARMUP + ROUNDS):
            value = 2 + i % 2  # 2, 3, 2, 3, ...: every version changes something on every server
            solo.append(await one_version(store, SOLO, 1, value))
            fleet.append(await one_version(store, FLEET, members, value))
    return fleet[WARMUP:], solo[WARMUP:]


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


GROUPS = {"1 node x 2": (2, 1), "1 node x 4": (4, 1), "2 nodes x 2": (4, 2)}  # label: (dp_size, nnodes)
ADMIN_KEY = "bench-admin-key"


def start_group(dp_size: int, nnodes: int) -> tuple[str, list[subprocess.Popen[bytes]]]:
    """A replica group of `dp_size` replicas over `nnodes` `sgconf serve` trees; (node 0's URL, every process)."""
    port, rendezvous = free_port(), free_port()
    procs = []
    for rank in range(nnodes):
        cmd = [sys.executable, "-m", "sgconf", "serve", "--port", str(port), "--dp-size", str(dp_size)]
        cmd += ["--max-total-tokens", "1024", "--log-level", "warning"]
        if nnodes > 1:
            cmd += ["--nnodes", str(nnodes), "--node-rank", str(rank), "--dist-init-addr", f"127.0.0.1:{rendezvous}"]
        env = {**os.environ, "PYTHONWARNINGS": "ignore", "SGCONF_ADMIN_API_KEY": ADMIN_KEY}
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))
    return f"http://127.0.0.1:{port}", procs


def group_rounds() -> dict[str, list[float]]:
    """Seconds per two-phase round for each group of GROUPS, WARMUP + ROUNDS rounds each, taking turns."""
    started = {label: start_group(*shape) for label, shape in GROUPS.items()}
    times: dict[str, list[float]] = {label: [] for label in GROUPS}
    try:
        with httpx.Client(headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=120) as client:
            for url, _ in started.values():
                wait("a replica group", lambda url=url: healthy(f"{url}/health"))
            for i in range(WARMUP + ROUNDS):
                for label, (url, _) in started.items():
                    start = time.perf_counter()
                    r = client.post(f"{url}/config/overrides", json={"stream_interval": 2 + i % 2})
                    took = time.perf_counter() - start
                    if r.status_code != 200:
                        raise SystemExit(f"bench_fleet: the round on {label} was refused: {r.text}")
                    times[label].append(took)
    finally:
        procs = [proc for _, group in started.values() for proc in group]
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=120)
    return {label: t[WARMUP:] for label, t in times.items()}


def print_group_rounds(times: dict[str, list[float]]) -> None:
    print()
    print(f"two-phase override round over a replica group ({ROUNDS} rounds each, the groups taking turns)")
    print(f"{'group':>12}  {'ranks':>5}  {'p50 ms':>8}  {'p99 ms':>8}")
    for label, (dp_size, _) in GROUPS.items():
        t = times[label]
        print(f"{label:>12}  {dp_size + 1:>5}  {statistics.median(t) * 1e3:8.1f}  {p(t, 0.99) * 1e3:8.1f}")
    two = times["2 nodes x 2"]
    for label in ("1 node x 2", "1 node x 4"):
        one = times[label]
        print(
            f"2 nodes x 2 / {label}: p50 {statistics.median(two) / statistics.median(one):.2f}x,"
            f" p99 {p(two, 0.99) / p(one, 0.99):.2f}x"
        )
    ratio = p(two, 0.99) / p(times["1 node x 2"], 0.99)
    print(f"goal p99 of 2 nodes x 2 <= 2.00x one node x 2: {ratio:.2f}x ({'met' if ratio <= 2 else 'missed'})")


def main() -> int:
    # etcd's data in memory when the machine has /dev/shm: a shared VM's fsync stalls are not what this measures
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="bench-fleet-", dir=shm) as tmp:
        etcd, store = start_etcd(Path(tmp))
        servers = [start_server(store, 99, SOLO)]
        results: dict[int, tuple[list[float], list[float]]] = {}
        try:
            for size in SIZES:
                new = [start_server(store, len(servers) - 1 + k) for k in range(size - (len(servers) - 1))]
                servers += new
                for proc in servers:
                    wait("a server", lambda proc=proc: healthy(f"{proc.base}/health"))  # type: ignore[attr-defined]
                results[size] = asyncio.run(block(store, size))
        finally:
            for proc in servers:
                proc.terminate()
            for proc in servers:
                proc.wait(timeout=120)
            etcd.terminate()
            etcd.wait(timeout=30)
    print(
        f"fleet set -> every server ACKs ({ROUNDS} versions per size, each beside one to a single-server fleet;"
        f" one etcd on loopback, data in {shm or 'a temp dir'}, {os.cpu_count()} cores)"
    )
    print(
        f"{'servers':>7}  {'p50 ms':>8}  {'p99 ms':>8}  {'max ms':>8}  {'1-server p50':>12}  {'1-server p99':>12}"
        f"  {'p50 ratio':>9}  {'p99 ratio':>9}"
    )
    for size, (times, solo) in results.items():
        print(
            f"{size:>7}  {statistics.median(times) * 1e3:8.1f}  {p(times, 0.99) * 1e3:8.1f}  {max(times) * 1e3:8.1f}"
            f"  {statistics.median(solo) * 1e3:12.1f}  {p(solo, 0.99) * 1e3:12.1f}"
            f"  {statistics.median(times) / statistics.median(solo):9.2f}  {p(times, 0.99) / p(solo, 0.99):9.2f}"
        )
    times, solo = results[SIZES[-1]]
    ratio = p(times, 0.99) / p(solo, 0.99)
    print(f"goal p99 at {SIZES[-1]} servers <= 2.00x one server: {ratio:.2f}x ({'met' if ratio <= 2 else 'missed'})")
    print_group_rounds(group_rounds())
    return 0


if __name__ == "__main__":
    sys.exit(main())
