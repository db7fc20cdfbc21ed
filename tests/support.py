"""Helpers every test folder shares: a free port, a polled deadline, the CLI in-process, `sgconf serve` as a process.

Every wait polls with a generous deadline and fails naming what it waited for: a busy
2-core machine starts an engine slowly, and nothing here measures speed.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import httpx

START_TIMEOUT_S = 240.0
T = TypeVar("T")
# the console script, without depending on where pip put it
SERVE = [sys.executable, "-c", "import sys; from sgconf.serving import main; sys.exit(main(sys.argv[1:]))", "serve"]


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(what: str, check: Callable[[], T], timeout_s: float = START_TIMEOUT_S, every_s: float = 0.05) -> T:
    """Poll `check` until it returns something truthy and return that; fail naming `what` past the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every_s)


def run_sgconf(capsys: Any, *argv: str) -> tuple[int, str, str]:
    """`sgconf ARGV` in this process: its exit status, stdout and stderr (read through `capsys`)."""
    from sgconf.serving import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


class ServeProcess:
    """`sgconf serve ARGS --port P` as a child process, its output in files (a full pipe would block it).

    `merge_output` sends stderr to the stdout file, in order; otherwise `stdout()` and
    `stderr()` read them apart. Used as a context manager, a process still running at
    the end is killed, so a failing test never leaves a server behind.
    """

    def __init__(
        self,
        *args: str,
        port: int | None = None,
        env: dict[str, str] | None = None,
        workdir: Path | None = None,
        merge_output: bool = True,
        inherit_sgconf_env: bool = True,
    ) -> None:
        self.port = free_port() if port is None else port
        self.base = f"http://127.0.0.1:{self.port}"
        if workdir is None:  # ours: removed once this object is gone (its output is read after the exit)
            workdir = Path(tempfile.mkdtemp(prefix="sgconf-serve-"))
            weakref.finalize(self, shutil.rmtree, workdir, True)
        self.workdir = workdir
        self._out = self.workdir / f"serve-{self.port}.out"
        self._err = self._out if merge_output else self.workdir / f"serve-{self.port}.err"
        base_env = {k: v for k, v in os.environ.items() if inherit_sgconf_env or not k.startswith("SGCONF_")}
        with self._out.open("w") as out, self._err.open("a") as err:
            self.proc = subprocess.Popen(
                [*SERVE, "--port", str(self.port), *args],
                stdout=out,
                stderr=err,
                cwd=self.workdir,
                env={**base_env, "PYTHONWARNINGS": "ignore", **(env or {})},
            )

    def stdout(self) -> str:
        return self._out.read_text()

    def stderr(self) -> str:
        return self._err.read_text()

    def wait_healthy(self, *, any_status: bool = False, timeout_s: float = START_TIMEOUT_S) -> dict[str, Any]:
        """The first `/health` answer that is 200 (any answer with `any_status`); fails with the log if it exits."""

        def answer() -> dict[str, Any] | None:
            assert self.proc.poll() is None, f"sgconf serve exited {self.proc.returncode}:\n{self.stderr()}"
            try:
                r = httpx.get(f"{self.base}/health", timeout=5)
            except httpx.TransportError:
                return None
            return r.json() if any_status or r.status_code == 200 else None

        return wait_until(f"sgconf serve on port {self.port} to answer /health", answer, timeout_s, every_s=0.1)

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 120.0) -> int:
        """Send `sig` and wait for the exit, killing it past `timeout_s`; returns the exit status (-9 if killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=60)

    def __enter__(self) -> ServeProcess:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.kill()


__all__ = ["SERVE", "START_TIMEOUT_S", "ServeProcess", "free_port", "run_sgconf", "wait_until"]
