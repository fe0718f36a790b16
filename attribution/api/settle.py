"""A job's verdict computed at most once per settle interval while its reports keep arriving (one worker's view).

512 node reports of one failed job arrive over a minute; each used to re-attribute the job. Here the first report
of a job attributes it, and a report arriving within `settle_seconds` of that attribution is stored only (the job
left pending in the store); one attribution is then scheduled for when the interval is over, which takes everything
stored by then. A worker that stops before it runs leaves the job pending: the next report, another worker or the
`attribution db attribute-pending` timer attributes it (store: evidence_seq > attributed_seq).
"""

from __future__ import annotations

import time
from typing import Hashable


class Settle:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._last: dict[Hashable, float] = {}  # job -> when this worker last attributed it (monotonic)
        self._scheduled: set[Hashable] = set()

    def may_attribute(self, key: Hashable, now: float | None = None) -> bool:
        """Whether a report of `key` may attribute its job now (no attribution of it within the interval)."""
        if self.seconds <= 0:
            return True
        now = time.monotonic() if now is None else now
        last = self._last.get(key)
        return last is None or now - last >= self.seconds

    def attributed(self, key: Hashable, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self._last[key] = now
        if len(self._last) > 10_000:  # forget the jobs whose interval is long over
            self._last = {k: t for k, t in self._last.items() if now - t < self.seconds}

    def delay(self, key: Hashable, now: float | None = None) -> float | None:
        """Seconds until the deferred attribution of `key` should run, or None when one is scheduled already.
        Marks it scheduled (`done` unmarks it)."""
        if key in self._scheduled:
            return None
        self._scheduled.add(key)
        now = time.monotonic() if now is None else now
        return max(0.0, self._last.get(key, now) + self.seconds - now)

    def done(self, key: Hashable) -> None:
        self._scheduled.discard(key)
