"""`runtime.reset()` puts the process back to its import-time config state, with no hook registered."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # starts a process: `make test-fast` leaves it out
def test_reset_returns_the_process_to_its_import_time_state() -> None:
    """Publish, install, record role reads, tag and configure logs; reset; everything is as at import."""
    code = textwrap.dedent(
        """
        import logging, os, structlog
        from runtime import process, publish, override_server_args, reset, is_published
        from runtime.logs import configure_logging, tag_process
        from runtime.roles import record_read
        from sgconf import load

        def state():
            return (
                process.current, process._view, list(process.installs), set(process.recorded),
                dict(process.log_tags), list(process.announcer), process.logging_configured,
                structlog.is_configured(), logging.getLogger("uvicorn").handlers[:],
            )

        before = state()
        publish(load([], env={}).record, role="engine")
        override_server_args(page_size=16).install()
        record_read("engine", "schedule")
        tag_process(dp_rank=3)
        configure_logging(level="warning")
        assert state() != before and is_published()
        reset()
        after = state()
        assert after == before, (before, after)
        assert not is_published()
        assert not hasattr(__import__("runtime.context").context, "_reset_hooks")
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env={"PATH": ""})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
