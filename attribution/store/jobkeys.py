"""Which jobs the store already has a verdict for: the cursor that lets a backfill resume where it stopped."""

from __future__ import annotations

from datetime import datetime
from typing import Iterable

from sqlalchemy import Engine, text

from attribution.store.jobs import SAME_JOB_WINDOW


def stored_job_starts(engine: Engine, cluster: str, job_ids: Iterable[str]) -> dict[str, list[datetime]]:
    """Start times of the stored jobs (with a verdict) among `job_ids` of `cluster`, by job id."""
    ids = sorted(set(job_ids))
    if not ids:
        return {}
    with engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT job_id, start_time FROM attribution.jobs "
            "WHERE cluster = :c AND job_id = ANY(CAST(:ids AS text[])) AND current_verdict_id IS NOT NULL"),
            {"c": cluster, "ids": ids}).all()
    out: dict[str, list[datetime]] = {}
    for job_id, start in rows:
        out.setdefault(job_id, []).append(start)
    return out


def is_stored(starts: dict[str, list[datetime]], job_id: str, start: datetime | None) -> bool:
    """The same job as the writer sees it: same id, start times within SAME_JOB_WINDOW (ids wrap after months)."""
    have = starts.get(job_id) or []
    if start is None:
        return bool(have)
    return any(abs(s - start) <= SAME_JOB_WINDOW for s in have)


__all__ = ["stored_job_starts", "is_stored"]
