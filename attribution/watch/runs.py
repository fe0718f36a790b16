"""Which state of a Kueue Workload ends a run, and which run it is. Pure: the Workload's JSON in, a value out.

A run (an attempt) ends when the Workload is Finished or Evicted (docs/log-formats.md 6.3): Finished is final,
Evicted is followed by a requeue, and the next admission is the next attempt (Kueue sets Evicted back to False
when it admits the workload again, and counts the evictions in `status.schedulingStats.evictions`, which numbers
the runs even when an earlier one was never seen). The run's key is the ending condition with its reason and time: the same
key in every later copy of the object, another one for the next attempt.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Mapping

from attribution.scope.kueue import object_time

#: The Finished reason of a run that succeeded (the others: Failed, OutOfSync).
SUCCEEDED = "Succeeded"


@dataclass(frozen=True)
class RunEnd:
    uid: str
    namespace: str
    name: str
    condition: str  # Finished or Evicted
    reason: str
    at: datetime | None
    key: str
    #: the run's number by Kueue's own count of the workload's evictions (`status.schedulingStats.evictions`,
    #: Kueue 0.13+), None where it keeps none
    kueue_attempt: int | None = None

    @property
    def failed(self) -> bool:
        return not (self.condition == "Finished" and self.reason == SUCCEEDED)

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


def run_end(workload: Mapping) -> RunEnd | None:
    """How the Workload's current run ended, or None while it is pending or running."""
    meta = workload.get("metadata") or {}
    conds = {c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or [] if isinstance(c, dict)}
    for kind in ("Finished", "Evicted"):
        c = conds.get(kind)
        if c and str(c.get("status")) == "True":
            stamp = str(c.get("lastTransitionTime") or "")
            at = object_time(stamp)
            reason = str(c.get("reason") or "")
            evictions = _evictions(workload)
            attempt = None if evictions is None else (max(1, evictions) if kind == "Evicted" else evictions + 1)
            return RunEnd(uid=str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"),
                          namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""),
                          condition=kind, reason=reason, at=at, key=f"{kind}/{reason}/{stamp}",
                          kueue_attempt=attempt)
    return None


def _evictions(workload: Mapping) -> int | None:
    """How many times Kueue evicted the workload so far (an eviction is counted when it happens), or None."""
    stats = (workload.get("status") or {}).get("schedulingStats")
    if not isinstance(stats, dict) or not isinstance(stats.get("evictions"), list):
        return None
    return sum(int(e.get("count") or 0) for e in stats["evictions"] if isinstance(e, dict))


def attempt_job_id(namespace: str, name: str, attempt: int) -> str:
    """The stored job of a run: `NS/NAME` (what `diagnose --kueue-workload` names) for the first, `NS/NAME@N` for
    the Nth: a requeued workload's runs are separate jobs with their own verdicts."""
    return f"{namespace}/{name}" if attempt <= 1 else f"{namespace}/{name}@{attempt}"


__all__ = ["RunEnd", "run_end", "attempt_job_id", "SUCCEEDED"]
