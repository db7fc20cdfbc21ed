"""One HTTP test client per serving mode: one engine in this process, or a two-replica group.

Route suites parametrise a module-scoped fixture over `MODES` and call `serve_in_mode`,
so every route is checked against both backends of the one HTTP app (the `http`
fixture of `tests/engine/conftest.py` does this for a module's `FLAGS`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from fastapi.testclient import TestClient

from engine.http.app import create_app
from runtime import override_server_args
from tests.support import wait_until

T = TypeVar("T")
MODES = ["engine", "group"]
# the admin key of the `serve` fixture's engines
ADMIN_KEY = "admin-secret"
ADMIN_AUTH = {"Authorization": f"Bearer {ADMIN_KEY}"}


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


def while_clients_generate(engine: Any, change: Callable[[], T], *, clients: int, requests: int, tokens: int) -> T:
    """Run `change` while `clients` threads each generate `requests` answers of `tokens`; every answer must be whole."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    start = threading.Barrier(clients + 1, timeout=60)

    def client(i: int) -> int:
        start.wait()
        prompts = [f"a client under load, {i}.{j}" for j in range(requests)]
        return sum(len(engine.generate(p, max_new_tokens=tokens, ignore_eos=True).token_ids) for p in prompts)

    with ThreadPoolExecutor(clients) as pool:
        answered = [pool.submit(client, i) for i in range(clients)]
        start.wait()
        result = change()
        assert [a.result(timeout=300) for a in answered] == [requests * tokens] * clients
    return result


@contextmanager
def live_server(app: Any) -> Iterator[tuple[str, int]]:
    """`app` served by a real uvicorn server (the one `sgconf serve` builds) on a free local port, in a thread."""
    import threading

    from engine.http.listeners import bind, uvicorn_server

    sock = bind("test", "127.0.0.1", 0, flag="--port")
    port = sock.getsockname()[1]
    server = uvicorn_server(app, grace_s=0)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="test-uvicorn", daemon=True)
    thread.start()

    def up() -> bool:
        assert thread.is_alive(), "the test server exited before it started"
        return bool(server.started)

    wait_until("the test server to start", up)
    try:
        yield "127.0.0.1", port
    finally:
        server.should_exit = True
        thread.join(60)
        sock.close()
