"""Real processes for the fleet tests: an etcd on loopback ports in a temp dir, and `sgconf serve` members.

The port, deadline and process helpers are the suite's own (`tests.support`).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import START_TIMEOUT_S, ServeProcess, free_port, wait_until

NO_ETCD = "the etcd binary is not installed -- run 'make etcd' (installs Debian's etcd-server when root)"


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


class Server(ServeProcess):
    """One `sgconf serve` process that is a member of a fleet, logging JSON."""

    def __init__(
        self,
        fleet: str,
        store: str,
        *args: str,
        server_id: str | None = None,
        env: dict[str, str] | None = None,
        port: int | None = None,
    ) -> None:
        port = free_port() if port is None else port
        self.server_id = server_id or f"s{port}"
        fleet_args = ("--fleet", fleet, "--fleet-store", store, "--fleet-server-id", self.server_id)
        super().__init__(*fleet_args, "--max-total-tokens", "1024", "--log-format", "json", *args, port=port, env=env)

    def wait_healthy(self, *, any_status: bool = True, timeout_s: float = START_TIMEOUT_S) -> dict[str, Any]:
        """The first `/health` answer, whatever its status: a member serves once in sync with its fleet, or gave up."""
        return super().wait_healthy(any_status=any_status, timeout_s=timeout_s)

    def health(self) -> dict[str, Any]:
        return httpx.get(f"{self.base}/health", timeout=30).json()

    def info(self) -> dict[str, Any]:
        return httpx.get(f"{self.base}/server_info", timeout=30).json()
