"""One report per job at a time in this worker process.

The store serializes the reports of one job anyway (a per-job advisory lock: every report re-attributes the
job from all its evidence). Without this gate, 200 node reports of one job arriving at once would take every
database connection of the worker and wait on that lock inside PostgreSQL, and the reports of other jobs would
wait behind them. With it, they queue here, in order, without a connection; other jobs go on.
"""

from __future__ import annotations

import contextlib
from typing import AsyncIterator, Hashable

import anyio

from attribution.api.errors import Busy


class JobGate:
    def __init__(self) -> None:
        self._entries: dict[Hashable, list] = {}  # key -> [lock, number of requests holding or waiting]

    def waiting(self) -> int:
        return sum(e[1] for e in self._entries.values())

    def behind(self, key: Hashable) -> int:
        """How many requests of this job wait behind the one inside."""
        entry = self._entries.get(key)
        return max(0, entry[1] - 1) if entry else 0

    @contextlib.asynccontextmanager
    async def hold(self, key: Hashable, wait_seconds: float) -> AsyncIterator[None]:
        """Enter when no other request of this job is inside; Busy after `wait_seconds`."""
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = [anyio.Lock(), 0]
        entry[1] += 1
        try:
            with anyio.move_on_after(wait_seconds) as scope:
                await entry[0].acquire()
            if scope.cancelled_caught:
                raise Busy(f"{entry[1] - 1} other report(s) of this job are ahead; try again")
            try:
                yield
            finally:
                entry[0].release()
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                del self._entries[key]
