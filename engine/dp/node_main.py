"""`sgconf serve --node-rank R` for R > 0: run this node's share of a multi-node replica group.

The node serves no HTTP; it finds the controller through the rendezvous store at
`--dist-init-addr` (`engine.dp.nodes`), starts one process per replica of this node,
and waits for them. Each replica joins the controller over its node link.
"""

from __future__ import annotations

import datetime
import os
import socket
import time
from typing import Any

import structlog

from engine.dp.nodes import DEFAULT_START_TIMEOUT_S, LINK_KEY, NodeLayout, join_rendezvous, split_addr
from engine.errors import WaitTimedOut

log = structlog.get_logger("engine.dp.controller")


def _wait_listening(host: str, port: int, timeout_s: float) -> None:
    """Return once something accepts connections at host:port; WaitTimedOut (a TimeoutError) past `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((host, port), timeout=max(0.05, min(1.0, deadline - time.monotonic()))).close()
            return
        except OSError:
            if time.monotonic() >= deadline:
                raise WaitTimedOut(f"nothing listens at {host}:{port}") from None
            time.sleep(0.2)


def serve_node(record: Any, early: Any = None, *, start_timeout_s: float | None = None) -> int:
    """Run this node's replicas of a multi-node group until they exit or SIGTERM/SIGINT; returns the exit status.

    Waits up to `start_timeout_s` (default `--dist-timeout`) for the controller (node 0) to be up, then starts one
    process per replica of this node; each joins the controller over its node link.
    When they have all exited (the controller stopped them, or went away) it returns 0
    when they all ended cleanly, 1 otherwise. A stop signal stops them first; so does
    this process ending any other way (killed): each replica holds a lifeline pipe to it.
    """
    import signal
    from multiprocessing.connection import wait

    import torch.multiprocessing as mp

    from engine.dp.replica import replica_main
    from sgconf.record import to_bags

    parallel = to_bags(record)["parallel"]
    if start_timeout_s is None:  # --dist-timeout, as on node 0
        start_timeout_s = float(parallel.dist_timeout or DEFAULT_START_TIMEOUT_S)
    layout = NodeLayout.of(parallel)
    host, port = split_addr(str(parallel.dist_init_addr))
    try:
        _wait_listening(host, port, start_timeout_s)  # torch's own wait would log a stack trace per try
        store = join_rendezvous(host, port, start_timeout_s)
        store.wait([LINK_KEY], datetime.timedelta(seconds=start_timeout_s))
        link = split_addr(store.get(LINK_KEY).decode())
    except (RuntimeError, TimeoutError) as exc:  # nothing listens there, or it is not a controller
        log.error(
            "node.no_controller",
            node=layout.node_rank,
            dist_init_addr=f"{host}:{port}",
            error=f"no controller answered within {start_timeout_s:g}s ({type(exc).__name__})"
            f" -- start node 0 (--node-rank 0) with the same --dist-init-addr, then this node",
        )
        return 1
    del store  # only the link's address was needed
    spawn = mp.get_context("spawn")
    processes, lifelines = [], []
    for index in layout.indices():
        ours, theirs = spawn.Pipe()  # closes when this process ends, however it ends: the replica then stops
        process = spawn.Process(
            target=replica_main,
            args=(index + 1, layout.dp_size + 1, (host, port), record, None, None),
            kwargs={"link": link, "layout": layout, "lifeline": theirs},
            name=f"sgconf-replica{index}",
            daemon=True,
        )
        process.start()
        theirs.close()
        processes.append(process)
        lifelines.append(ours)
    log.info("node.start", node=layout.node_rank, replicas=list(layout.indices()), controller=f"{link[0]}:{link[1]}")
    signalled = False
    while any(p.is_alive() for p in processes):
        wait([p.sentinel for p in processes if p.is_alive()], timeout=0.5)
        if early is not None and early.received and not signalled:
            signalled = True  # each replica leaves the group cleanly on SIGTERM
            for p in processes:
                if p.is_alive() and p.pid is not None:
                    os.kill(p.pid, signal.SIGTERM)
    codes = [p.exitcode for p in processes]
    log.info("node.stop", node=layout.node_rank, exitcodes=codes)
    return 0 if all(code == 0 for code in codes) else 1


__all__ = ["serve_node"]
