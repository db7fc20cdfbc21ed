"""Real processes for the fleet tests: an etcd on loopback ports in a temp dir, and `sgconf serve` members.

Every wait polls with a generous deadline: a busy 2-core machine starts an engine
slowly, and nothing here measures speed.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

START_TIMEOUT_S = 180.0
NO_ETCD = "the etcd binary is not installed -- run 'make etcd' (installs Debian's etcd-server when root)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what: str, check: Callable[[], Any], timeout_s: float = START_TIMEOUT_S, every_s: float = 0.1) -> Any:
    """Poll `check` until it returns something truthy; fail naming `what` past the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every_s)


class Etcd:
    """One etcd member on 127.0.0.1, its data in `workdir`; can be stopped and started again on the same ports."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("etcd")
        if binary is None:
            pytest.skip(NO_ETCD)
        self.binary = binary
        self.workdir = workdir
        self.client_port, self.peer_port = free_port(), free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"etcd://127.0.0.1:{self.client_port}"

    def start(self) -> Etcd:
        client, peer = f"http://127.0.0.1:{self.client_port}", f"http://127.0.0.1:{self.peer_port}"
        cmd = [
            self.binary,
            "--name",
            "t",
            "--data-dir",
            str(self.workdir / "data"),
            "--listen-client-urls",
            client,
            "--advertise-client-urls",
            client,
            "--listen-peer-urls",
            peer,
            "--initial-advertise-peer-urls",
            peer,
            "--initial-cluster",
            f"t={peer}",
            "--log-level",
            "error",
        ]
        log = open(self.workdir / "etcd.log", "ab")  # noqa: SIM115 - the process keeps it
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=log)
        log.close()
        wait_until("etcd to answer", self._healthy, timeout_s=60)
        return self

    def _healthy(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, (self.workdir / "etcd.log").read_text()
        try:
            return httpx.get(f"http://127.0.0.1:{self.client_port}/health", timeout=2).json().get("health") == "true"
        except (httpx.TransportError, ValueError):
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self.proc = None


class Server:
    """One `sgconf serve` process that is a member of a fleet."""

    def __init__(
        self,
        fleet: str,
        store: str,
        *args: str,
        server_id: str | None = None,
        env: dict[str, str] | None = None,
        port: int | None = None,
    ) -> None:
        self.port = port or free_port()
        self.server_id = server_id or f"s{self.port}"
        self.base = f"http://127.0.0.1:{self.port}"
        cmd = [
            sys.executable,
            "-c",
            "import sys; from sgconf.serving import main; sys.exit(main(sys.argv[1:]))",
            "serve",
            "--port",
            str(self.port),
            "--fleet",
            fleet,
            "--fleet-store",
            store,
            "--fleet-server-id",
            self.server_id,
            "--max-total-tokens",
            "1024",
            "--log-format",
            "json",
            *args,
        ]
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})},
        )

    def wait_healthy(self) -> dict[str, Any]:
        """The first `/health` answer (the server serves only once it is in sync with its fleet, or gave up)."""

        def first() -> dict[str, Any] | None:
            assert self.proc.poll() is None, self.proc.communicate()[0]
            try:
                r = httpx.get(f"{self.base}/health", timeout=5)
            except httpx.TransportError:
                return None
            return r.json()

        return wait_until(f"server {self.server_id} to serve", first)

    def health(self) -> dict[str, Any]:
        return httpx.get(f"{self.base}/health", timeout=30).json()

    def info(self) -> dict[str, Any]:
        return httpx.get(f"{self.base}/server_info", timeout=30).json()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.communicate(timeout=60)

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        return out
