"""Blocking work (database transactions, diagnosing a bundle) off the event loop, bounded.

Each `Lane` allows a fixed number of calls at once (the database lane: the connection pool's size) and lets a
request wait at most `wait_seconds` for its turn; after that the request gets a 503 and the reporter retries or
keeps its spool. Once a call runs it runs to the end (a thread cannot be stopped half-way through a transaction);
its own time is bounded by the database's statement and lock timeouts and the ingest deadline.
"""

from __future__ import annotations

from typing import Callable, TypeVar

import anyio
import anyio.to_thread

from attribution.api.errors import Busy

T = TypeVar("T")


class Lane:
    def __init__(self, name: str, slots: int, wait_seconds: float) -> None:
        self.name = name
        self.slots = slots
        self.wait_seconds = wait_seconds
        self._limiter: anyio.CapacityLimiter | None = None

    def _get(self) -> anyio.CapacityLimiter:
        if self._limiter is None:  # made on first use, inside the event loop that will use it
            self._limiter = anyio.CapacityLimiter(self.slots)
        return self._limiter

    async def run(self, fn: Callable[..., T], *args, wait_seconds: float | None = None) -> T:
        """Run fn(*args) in a thread once a slot is free; Busy when none frees up within the wait."""
        limiter = self._get()
        wait = self.wait_seconds if wait_seconds is None else wait_seconds
        with anyio.move_on_after(max(0.0, wait)) as scope:
            await limiter.acquire()
        if scope.cancelled_caught:
            raise Busy(f"all {self.slots} {self.name} slots stayed busy for {wait:.3g} s; try again")
        try:
            return await anyio.to_thread.run_sync(fn, *args)
        finally:
            limiter.release()
