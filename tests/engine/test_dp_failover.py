"""A replica killed (SIGKILL) while it holds a request: the request is answered by the other replica.

The victim is stopped (SIGSTOP) before the request reaches it, so it cannot answer
first; once the controller shows the request in flight there, it is killed. Every wait
polls with a generous deadline.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import pytest

from tests.support import wait_until

pytestmark = pytest.mark.slow  # starts processes or servers: `make test-fast` leaves it out

BODY = {"text": "a request that outlives its replica", "max_new_tokens": 4}


def test_a_killed_replicas_request_is_retried_on_the_healthy_one() -> None:
    """SIGKILL with a request on replica 1: 200 from replica 0 with the same tokens; /health names the dead one."""
    from fastapi.testclient import TestClient

    from engine.dp.controller import DPController
    from engine.dp.group_backend import ReplicaGroupBackend
    from engine.http.app import create_app
    from runtime import override_server_args

    with override_server_args(role="dp_controller", dp_size=2, replica_heartbeat_interval_s=0.2):
        controller = DPController(monitor=False)
        try:
            client = TestClient(create_app(ReplicaGroupBackend(controller)))
            answers = [client.post("/generate", json=BODY).json() for _ in range(3)]  # turns 0, 1, 2
            assert [a["meta_info"]["dp_rank"] for a in answers] == [0, 1, 0]
            victim = controller.replicas[1]
            os.kill(victim.pid, signal.SIGSTOP)
            result: dict[str, Any] = {}
            worker = threading.Thread(target=lambda: result.update(r=client.post("/generate", json=BODY)))
            worker.start()  # turn 3: replica 1
            wait_until("the request to reach replica 1", lambda: victim.inflight == 1)
            os.kill(victim.pid, signal.SIGKILL)
            worker.join(120)
            r = result["r"]
            assert r.status_code == 200, r.text
            assert (r.json()["meta_info"]["dp_rank"], r.json()["output_ids"]) == (0, answers[0]["output_ids"])
            wait_until("replica 1 to be seen as exited", lambda: not victim.alive())
            health = client.get("/health")
            assert health.status_code == 503
            assert health.json()["detail"] == "replica(s) 1 exited -- restart them with POST /replicas/<index>/restart"
            picks = [client.post("/generate", json=BODY).json()["meta_info"]["dp_rank"] for _ in range(2)]
            assert picks == [0, 0]
        finally:
            controller.shutdown()
