"""One HTTP test client per serving mode: one engine in this process, or a two-replica group.

Route suites parametrise a module-scoped fixture over `MODES` and call `serve_in_mode`,
so every route is checked against both backends of the one HTTP app. Replica processes
report and answer on their own time: `wait_for` polls for what a test waits on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from engine.http.app import create_app
from runtime import override_server_args

MODES = ["engine", "group"]


@contextmanager
def serve_in_mode(mode: str, workdir: Path, **flags: Any) -> Iterator[TestClient]:
    """A client of the app around one engine (`engine`) or a controller with two replicas (`group`)."""
    if mode == "engine":
        from engine.engine import Engine
        from engine.http.engine_backend import EngineBackend

        with override_server_args(**flags) as ctx:
            engine = Engine(ctx.record)
            try:
                yield TestClient(create_app(EngineBackend(engine)))
            finally:
                engine.shutdown(unpublish=False)
        return
    from engine.dp.controller import DPController
    from engine.dp.group_backend import ReplicaGroupBackend

    with override_server_args(role="dp_controller", dp_size=2, **flags):
        controller = DPController(workdirs=lambda i: str(workdir))
        try:
            with TestClient(create_app(ReplicaGroupBackend(controller))) as client:
                yield client
        finally:
            controller.shutdown()


def wait_for(condition: Callable[[], Any], what: str, deadline_s: float = 120.0) -> Any:
    """Poll `condition` until it is truthy and return it; fail naming `what` after a generous deadline."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        got = condition()
        if got:
            return got
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


@contextmanager
def live_server(app: Any) -> Iterator[tuple[str, int]]:
    """`app` served by a real uvicorn server (the one `sgconf serve` builds) on a free local port, in a thread."""
    import threading
    import time

    from engine.http.listeners import bind, uvicorn_server

    sock = bind("test", "127.0.0.1", 0, flag="--port")
    port = sock.getsockname()[1]
    server = uvicorn_server(app, grace_s=0)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="test-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the test server did not start"
        time.sleep(0.01)
    try:
        yield "127.0.0.1", port
    finally:
        server.should_exit = True
        thread.join(60)
        sock.close()
