"""Retention: dropping a month of events (a partition of `events`) with the links that point into it.

The links (job_events with the job, event_jobs with the event) are no foreign keys to events, so the month can
be detached while links reference it (a foreign key made DETACH PARTITION fail, on one server as on Citus). Each
step is its own transaction, so on Citus no DDL follows a multi-shard change in one transaction: the month is
detached first (its events leave every view at once), then its links are deleted, then the table is dropped.
The rollups (fault_weeks, fault_series, failed_roots, failed_root_series) and the verdicts keep the history. Rows
of the month in the DEFAULT partition (0006: times no month partition covered when they were stored) are deleted
with it.

`prune` (`attribution db prune --older-than 180d`) applies this to every month before a cutoff, without
blocking ingest:

- Months of events wholly before the cutoff are dropped as partitions (store/retention.drop_event_month: the
  month is detached, its links deleted, the table dropped). The detach takes a short exclusive lock on `events`:
  it waits at most `lock_timeout_ms` for it (so it never queues ingests behind a long transaction) and is tried
  again later in the run, then reported as left for the next run.
- Rows before the cutoff in the month that holds it and in `events_default`, and job links before it, are
  deleted in small batches, each its own short transaction (row locks only).
- Jobs that ended before the cutoff are deleted in batches with their links (job_events); their verdicts,
  coverage, counters and kept evidence go with them (foreign keys with ON DELETE CASCADE).
- Alert cooldown keys older than the cutoff are deleted, and the alert deliveries decided before it that are no
  longer owed (delivered or given up).
The rollups (fault_weeks, fault_series, failed_roots, failed_root_series), the drain audit (drain_actions), node
resumes, drain policies and rule packs are kept: they are small and they are the fleet's history.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import date, datetime, timezone

from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

UTC = timezone.utc


def _bounds(month: date) -> tuple[datetime, datetime, str]:
    lo = datetime(month.year, month.month, 1, tzinfo=UTC)
    hi = datetime(month.year + (month.month == 12), month.month % 12 + 1, 1, tzinfo=UTC)
    return lo, hi, f"events_p{month.year:04d}{month.month:02d}"


def drop_event_month(engine: Engine, month: date, lock_timeout_ms: int | None = None) -> dict[str, int]:
    """Drop the events of `month` (its partition, and its rows in the default partition) and their links.
    Returns what was removed; a month dropped before removes nothing (idempotent). With `lock_timeout_ms`, the
    detach waits at most that long for its lock on `events` (raising lock_not_available, SQLSTATE 55P03) instead
    of queueing every ingest behind it."""
    lo, hi, part = _bounds(month)
    out = {"events": 0, "job_events": 0, "event_jobs": 0}
    with engine.begin() as c:
        if lock_timeout_ms is not None:
            c.execute(text(f"SET LOCAL lock_timeout = {int(lock_timeout_ms)}"))
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


# -- `db prune --older-than`: everything older than a cutoff

S = "attribution"


@dataclass
class PruneResult:
    cutoff: datetime
    months: list[str] = field(default_factory=list)  # partitions dropped
    months_left: list[str] = field(default_factory=list)  # could not take the lock this run
    events: int = 0
    job_links: int = 0
    event_links: int = 0
    jobs: int = 0
    alert_keys: int = 0
    alert_deliveries: int = 0

    def as_dict(self) -> dict:
        return {"cutoff": self.cutoff.isoformat(), "months": self.months, "months_left": self.months_left,
                "events": self.events, "job_links": self.job_links, "event_links": self.event_links,
                "jobs": self.jobs, "alert_keys": self.alert_keys, "alert_deliveries": self.alert_deliveries}


def _months_before(engine: Engine, cutoff: datetime) -> list[date]:
    """The monthly partitions of events whose whole month lies before the cutoff."""
    with engine.connect() as c:
        names = c.execute(text(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'attribution.events'::regclass AND c.relname ~ '^events_p[0-9]{6}$'")).scalars()
        months = sorted(date(int(n[8:12]), int(n[12:14]), 1) for n in names)
    out = []
    for m in months:
        hi = datetime(m.year + (m.month == 12), m.month % 12 + 1, 1, tzinfo=UTC)
        if hi <= cutoff:
            out.append(m)
    return out


def _batched(engine: Engine, sql: str, params: dict, batch: int) -> int:
    total = 0
    while True:
        with engine.begin() as c:
            n = c.execute(text(sql), {**params, "n": batch}).rowcount or 0
        total += n
        if n < batch:
            return total


def _delete_jobs(engine: Engine, cutoff: datetime, batch: int) -> int:
    """Delete the jobs that ended before the cutoff, `batch` at a time, with their links (job_events has no
    foreign key to jobs since 0019; the other per-job tables go by ON DELETE CASCADE). Returns the jobs deleted."""
    total = 0
    while True:
        with engine.begin() as c:
            n = c.execute(text(
                f"WITH gone AS (DELETE FROM {S}.jobs WHERE (job_id, id) IN (SELECT job_id, id FROM {S}.jobs "
                "WHERE coalesce(end_time, start_time) < :cut LIMIT :n) RETURNING job_id, id), "
                f"links AS (DELETE FROM {S}.job_events je USING gone "
                "WHERE je.job_id = gone.job_id AND je.job_ref = gone.id) "
                "SELECT count(*) FROM gone"), {"cut": cutoff, "n": batch}).scalar_one()
        total += n
        if n < batch:
            return total


def prune(engine: Engine, cutoff: datetime, *, batch: int = 5000, lock_timeout_ms: int = 2000,
          tries: int = 3, progress=None) -> PruneResult:
    """Remove what is older than `cutoff` (see the module's doc). Safe to run again; returns what it removed."""
    say = progress or (lambda msg: None)
    res = PruneResult(cutoff)
    pending = _months_before(engine, cutoff)
    for attempt in range(tries):
        left = []
        for m in pending:
            try:
                n = drop_event_month(engine, m, lock_timeout_ms=lock_timeout_ms)
            except OperationalError as exc:  # lock_not_available: ingests hold events; try again later
                if getattr(getattr(exc, "orig", None), "sqlstate", None) != "55P03":
                    raise
                left.append(m)
                continue
            res.months.append(f"{m:%Y-%m}")
            res.events += n["events"]
            res.job_links += n["job_events"]
            res.event_links += n["event_jobs"]
            say(f"{m:%Y-%m}: dropped {n['events']} event(s)")
        pending = left
        if not pending:
            break
        time.sleep(min(5.0, 0.5 * (attempt + 1)))
    res.months_left = [f"{m:%Y-%m}" for m in pending]
    # rows before the cutoff that no dropped month held: the cutoff's own month, events_default, older links
    res.events += _batched(engine, f"DELETE FROM {S}.events WHERE (node_key, id, occurred_at) IN ("
                                   f"SELECT node_key, id, occurred_at FROM {S}.events "
                                   "WHERE occurred_at < :cut LIMIT :n)", {"cut": cutoff}, batch)
    res.job_links += _batched(engine, f"DELETE FROM {S}.job_events WHERE (job_id, job_ref, event_id) IN ("
                                      f"SELECT job_id, job_ref, event_id FROM {S}.job_events "
                                      "WHERE event_time < :cut LIMIT :n)", {"cut": cutoff}, batch)
    res.event_links += _batched(engine, f"DELETE FROM {S}.event_jobs WHERE (node_key, event_id, job_ref) IN ("
                                        f"SELECT node_key, event_id, job_ref FROM {S}.event_jobs "
                                        "WHERE event_time < :cut LIMIT :n)", {"cut": cutoff}, batch)
    res.jobs = _delete_jobs(engine, cutoff, max(1, batch // 10))
    say(f"{res.jobs} job(s) ended before {cutoff:%Y-%m-%d}")
    with engine.begin() as c:
        res.alert_keys = c.execute(text(f"DELETE FROM {S}.alert_keys WHERE sent_at < :cut"),
                                   {"cut": cutoff}).rowcount or 0
    res.alert_deliveries = _batched(engine, f"DELETE FROM {S}.alert_deliveries WHERE id IN (SELECT id FROM "
                                            f"{S}.alert_deliveries WHERE created_at < :cut AND (delivered_at IS NOT "
                                            "NULL OR gave_up_at IS NOT NULL) LIMIT :n)", {"cut": cutoff}, batch)
    return res


__all__ = ["PruneResult", "drop_event_month", "prune"]
