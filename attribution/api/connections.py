"""uvicorn's HTTP/1.1 protocol with a connection limit and a header timeout (issue 18, M6).

Connections that send their request headers slowly, or never, hold a file descriptor each; 1,030 of them
exhausted a service started with systemd's default of 1,024 open files and /healthz stopped answering. Here:
- request headers must arrive within `service.header_timeout_seconds` of the connection (or of the end of the
  previous response on a kept-alive connection), else the connection is closed;
- at most `service.max_connections` connections per worker: past it, the oldest connection still waiting for
  its headers is closed to make room (a new client, /healthz included, always gets in); when every connection
  is busy with a request, the new one is closed.
`attribution serve` passes this class to uvicorn (`http=`); the limits come from the settings of the process.
"""

from __future__ import annotations

import asyncio
import time

from uvicorn.protocols.http.h11_impl import H11Protocol


class BoundedH11Protocol(H11Protocol):
    limits: tuple[int, float] | None = None  # (max_connections, header_timeout_seconds), read once per process

    @classmethod
    def _limits(cls) -> tuple[int, float]:
        if cls.limits is None:
            from attribution.config import load_settings

            s = load_settings().service
            cls.limits = (s.max_connections, s.header_timeout_seconds)
        return cls.limits

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_timer: asyncio.TimerHandle | None = None
        self._waiting_since: float | None = None
        self._seen_cycle = None
        super().connection_made(transport)
        max_connections, _ = self._limits()
        if len(self.connections) > max_connections:
            waiting = [c for c in self.connections
                       if c is not self and getattr(c, "_waiting_since", None) is not None]
            if waiting:
                oldest = min(waiting, key=lambda c: c._waiting_since)
                oldest.transport.abort()
            else:
                transport.abort()
                return
        self._arm()

    def _arm(self) -> None:
        _, timeout = self._limits()
        self._disarm()
        self._waiting_since = time.monotonic()
        self._header_timer = self.loop.call_later(timeout, self._headers_too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        self._waiting_since = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self._waiting_since is not None and not self.transport.is_closing():
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.cycle is not None and self.cycle is not self._seen_cycle:  # a request's headers are complete
            self._seen_cycle = self.cycle
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()  # the next request's headers have the same time to arrive

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)
