"""Retention: dropping a month of events (a partition of `events`) with the links that point into it.

The links (job_events with the job, event_jobs with the event) are no foreign keys to events, so the month can
be detached while links reference it (a foreign key made DETACH PARTITION fail, on one server as on Citus). Each
step is its own transaction, so on Citus no DDL follows a multi-shard change in one transaction: the month is
detached first (its events leave every view at once), then its links are deleted, then the table is dropped.
The rollups (fault_weeks, fault_series, failed_roots) and the verdicts keep the history. Rows of the month in the
DEFAULT partition (0006: times no month partition covered when they were stored) are deleted with it.
"""

from __future__ import annotations

from datetime import date, datetime, timezone

from sqlalchemy import Engine, text

UTC = timezone.utc


def _bounds(month: date) -> tuple[datetime, datetime, str]:
    lo = datetime(month.year, month.month, 1, tzinfo=UTC)
    hi = datetime(month.year + (month.month == 12), month.month % 12 + 1, 1, tzinfo=UTC)
    return lo, hi, f"events_p{month.year:04d}{month.month:02d}"


def drop_event_month(engine: Engine, month: date) -> dict[str, int]:
    """Drop the events of `month` (its partition, and its rows in the default partition) and their links.
    Returns what was removed; a month dropped before removes nothing (idempotent)."""
    lo, hi, part = _bounds(month)
    out = {"events": 0, "job_events": 0, "event_jobs": 0}
    with engine.begin() as c:
        exists = c.execute(text("SELECT to_regclass(:p) IS NOT NULL"), {"p": f"attribution.{part}"}).scalar()
        if exists:
            out["events"] = int(c.execute(text(f"SELECT count(*) FROM attribution.{part}")).scalar())
            attached = c.execute(text(
                "SELECT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = CAST(:p AS regclass))"),
                {"p": f"attribution.{part}"}).scalar()
            if attached:
                c.execute(text(f"ALTER TABLE attribution.events DETACH PARTITION attribution.{part}"))
    with engine.begin() as c:
        if c.execute(text("SELECT to_regclass('attribution.events_default') IS NOT NULL")).scalar():
            out["events"] += c.execute(text(
                "DELETE FROM attribution.events_default WHERE occurred_at >= :lo AND occurred_at < :hi"),
                {"lo": lo, "hi": hi}).rowcount or 0
    for table in ("job_events", "event_jobs"):
        with engine.begin() as c:
            out[table] = c.execute(text(
                f"DELETE FROM attribution.{table} WHERE event_time >= :lo AND event_time < :hi"),
                {"lo": lo, "hi": hi}).rowcount or 0
    if exists:
        with engine.begin() as c:
            c.execute(text(f"DROP TABLE attribution.{part}"))
    return out


__all__ = ["drop_event_month"]
