"""A replica that stops (SIGSTOP) is detected from its missing progress reports; its requests complete elsewhere.

The liveness check is driven by the test (`monitor=False`, `check_liveness()` polled
until its condition holds, with generous deadlines), so a request is known to sit on
the stopped replica before that replica is declared unresponsive.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import pytest

from tests.support import wait_until

pytestmark = pytest.mark.slow  # starts processes or servers: `make test-fast` leaves it out

ADMIN = {"Authorization": "Bearer admin-key"}
BODY = {"text": "a request that outlives its replica", "max_new_tokens": 4}


def test_stopped_replica_is_unhealthy_and_its_request_completes_elsewhere() -> None:
    """SIGSTOP: /health 503 naming it, its pending request is retried on replica 0, it gets no new work; SIGCONT heals."""
    from fastapi.testclient import TestClient

    from engine.dp.controller import DPController
    from engine.dp.group_backend import ReplicaGroupBackend
    from engine.http.app import create_app
    from runtime import override_server_args

    with override_server_args(
        role="dp_controller",
        dp_size=2,
        admin_api_key="admin-key",
        replica_heartbeat_interval_s=0.2,
        replica_stall_timeout_s=3.0,
    ):
        controller = DPController(monitor=False)
        try:
            client = TestClient(create_app(ReplicaGroupBackend(controller)))
            answers = [client.post("/generate", json=BODY).json() for _ in range(3)]  # turns 0, 1, 2
            assert [a["meta_info"]["dp_rank"] for a in answers] == [0, 1, 0]
            expected = answers[0]["output_ids"]
            victim = controller.replicas[1]
            wait_until("replica 1's first progress report", lambda: victim.progress > 0)

            os.kill(victim.pid, signal.SIGSTOP)
            try:
                result: dict[str, Any] = {}
                worker = threading.Thread(target=lambda: result.update(r=client.post("/generate", json=BODY)))
                worker.start()  # turn 3: replica 1, which is stopped
                wait_until("the request to reach replica 1", lambda: victim.inflight == 1)
                assert client.get("/health").status_code == 200  # not declared yet: nothing checked
                wait_until("replica 1 to be declared unresponsive", lambda: 1 in controller.check_liveness())
                worker.join(120)
                r = result["r"]
                assert r.status_code == 200, r.text
                assert (r.json()["meta_info"]["dp_rank"], r.json()["output_ids"]) == (0, expected)

                health = client.get("/health")
                assert health.status_code == 503
                assert health.json()["detail"] == (
                    "replica(s) 1 stopped responding -- they get no requests until they report progress again;"
                    " stop and restart them if they do not"
                )
                assert [row["responsive"] for row in health.json()["replicas"]] == [True, False]
                picks = [client.post("/generate", json=BODY).json()["meta_info"]["dp_rank"] for _ in range(3)]
                assert picks == [0, 0, 0]
                r = client.post("/config/overrides", json={"schedule_policy": "lpm"}, headers=ADMIN)
                assert r.status_code == 503
                assert r.json()["detail"].startswith("cannot change the config while replica(s) 1 are not responding")
            finally:
                os.kill(victim.pid, signal.SIGCONT)

            wait_until("replica 1 to report progress again", lambda: 1 in controller.check_liveness())
            assert client.get("/health").status_code == 200
            picks = {client.post("/generate", json=BODY).json()["meta_info"]["dp_rank"] for _ in range(2)}
            assert picks == {0, 1}
        finally:
            controller.shutdown()


def test_busy_replica_whose_steps_stop_is_stalled() -> None:
    """A replica that keeps reporting but finishes no step while it holds requests counts as stalled."""
    from engine.dp.controller import Replica
    from engine.dp.messages import Heartbeat

    def beat(progress: int) -> Heartbeat:
        return Heartbeat(0, progress=progress, queued=0, running=2)

    class Proc:
        exitcode = None

        def is_alive(self) -> bool:
            return True

    replica = Replica(0, Proc(), None)
    now = [100.0]
    replica.clock = lambda: now[0]
    replica._report(beat(5))
    for _ in range(10):
        now[0] += 1.0
        replica._report(beat(5))  # alive, but stuck
    assert replica.stalled_for(now[0]) == (10.0, "no finished step for 10.0s with 2 requests")
    replica._report(beat(6))
    assert replica.stalled_for(now[0]) == (0.0, "no progress report for 0.0s")
    now[0] += 4.0
    assert replica.stalled_for(now[0]) == (4.0, "no progress report for 4.0s")
