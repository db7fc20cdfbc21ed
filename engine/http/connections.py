"""Connection hygiene: how long a client may take to send a request, and how many may be served at once.

uvicorn closes idle keep-alive connections (`keep_alive_timeout_s`) and answers 503
past a cap (`max_connections`, its `limit_concurrency`), but a connection that sends
half a request line and then nothing is held forever: enough of them exhaust the file
descriptors and even `/health` stops answering. `HeadTimedH11` adds the missing timer:
from the first byte of a request (or the connection's start) its headers must arrive
within `header_timeout_s`, else the server answers 408 and closes the socket. The body
has its own deadline, `body_timeout_s`, enforced where it is read (`engine.http.limits`).
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

_TIMEOUT_ANSWER = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: 91\r\n\r\n"
    b'{"detail": "the request headers did not arrive in time -- send the whole request at once"}\n'
)


class HeadTimedH11(H11Protocol):
    """uvicorn's h11 protocol, closing connections whose request headers do not arrive within `head_timeout_s`."""

    head_timeout_s: float = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_timer: asyncio.TimerHandle | None = None
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self._arm()  # part of a request head: its clock runs from its first byte
        else:
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._disarm()  # idle between requests: the keep-alive timeout applies

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

    def _disarm(self) -> None:
        timer = getattr(self, "_head_timer", None)
        if timer is not None:
            timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self.cycle is None or self.cycle.response_complete:
            self.transport.write(_TIMEOUT_ANSWER)
        self.transport.close()


def protocol_for(header_timeout_s: float) -> type[HeadTimedH11]:
    """The protocol class for one server, carrying its header timeout."""
    return type("HeadTimedH11", (HeadTimedH11,), {"head_timeout_s": float(header_timeout_s)})


def uvicorn_options(serving: Any) -> dict[str, Any]:
    """uvicorn.Config keywords from the serving settings: the protocol, keep-alive and the connection cap."""
    return {
        "http": protocol_for(serving.header_timeout_s),
        "timeout_keep_alive": serving.keep_alive_timeout_s,
        "limit_concurrency": serving.max_connections,
    }


__all__ = ["HeadTimedH11", "protocol_for", "uvicorn_options"]
