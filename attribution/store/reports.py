"""The SQL of the HTML reports: the fleet report over the public views, and one stored job for its timeline.

The fleet report reads only the views of docs/store.md (job_verdicts, fault_events, node_faults_weekly,
recurring_faults, drain_candidates, lost_gpu_hours, failure_recurrence), all in one REPEATABLE READ snapshot so its numbers agree with each other.
A stored job's timeline reads the job's current verdict document and the events linked to the job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone

from sqlalchemy import Connection, Engine, text

from attribution.errors import InputError
from attribution.model import Event
from attribution.store.codec import event_from_row
from attribution.store.links import EVENT_ROW, job_event_rows

UTC = timezone.utc

#: The jobs that count as failed: every outcome but `none` (a completed job).
FAILED = "v.outcome IS DISTINCT FROM 'none'"
#: When a job counts for a week: its end (its start while it has none).
JOB_TIME = "coalesce(v.job_end, v.job_start)"
GPU_HOURS = "extract(epoch FROM (v.job_end - v.job_start)) / 3600.0 * v.node_count * v.gpus_per_node"

FAILED_JOBS_WEEKLY = f"""
SELECT (date_trunc('week', {JOB_TIME} AT TIME ZONE 'UTC'))::date AS week,
       coalesce(v.outcome, 'not attributed yet') AS outcome, count(*) AS jobs
FROM attribution.job_verdicts v
WHERE {FAILED} AND {JOB_TIME} >= :since AND {JOB_TIME} < :until
GROUP BY 1, 2 ORDER BY 1, 2"""

FAULT_EVENTS_WEEKLY = """
SELECT f.week, f.kind, sum(f.events)::bigint AS events
FROM attribution.node_faults_weekly f
WHERE f.week >= CAST(:since AS date) AND f.week < CAST(:until AS date)
GROUP BY 1, 2 ORDER BY 1, 2"""

FAILED_GPU_HOURS = f"""
SELECT coalesce(v.outcome, 'not attributed yet') AS outcome,
       coalesce(v.root_kind, '(no root cause event)') AS cause,
       count(*) AS jobs,
       coalesce(sum({GPU_HOURS}), 0)::float AS gpu_hours,
       count(*) FILTER (WHERE v.gpus_per_node IS NULL OR v.job_end IS NULL) AS jobs_without_size,
       coalesce(sum(l.gpu_hours_lost), 0)::float AS lost_gpu_hours
FROM attribution.job_verdicts v
LEFT JOIN attribution.lost_gpu_hours l ON l.verdict_id = v.verdict_id
WHERE {FAILED} AND {JOB_TIME} >= :since AND {JOB_TIME} < :until
GROUP BY 1, 2 ORDER BY gpu_hours DESC, jobs DESC, 1, 2"""

TOTALS = f"""
SELECT count(*) AS jobs, count(*) FILTER (WHERE {FAILED}) AS failed,
       coalesce(sum({GPU_HOURS}) FILTER (WHERE {FAILED}), 0)::float AS failed_gpu_hours
FROM attribution.job_verdicts v
WHERE {JOB_TIME} >= :since AND {JOB_TIME} < :until"""

RECURRING_NODES = """
SELECT r.cluster, r.node, string_agg(DISTINCT r.kind || coalesce(' ' || r.code, ''), ', ') AS faults,
       max(r.weeks) AS weeks, sum(r.events)::bigint AS events, sum(r.jobs_failed)::bigint AS jobs_failed,
       count(DISTINCT r.gpu) AS gpus, max(r.last_seen) AS last_seen
FROM attribution.recurring_faults r
WHERE r.last_seen >= :since
GROUP BY r.cluster, r.node
ORDER BY weeks DESC, events DESC, jobs_failed DESC, r.cluster, r.node
LIMIT :limit"""

RECURRING_GPUS = """
SELECT r.cluster, r.node, r.gpu, string_agg(DISTINCT r.kind || coalesce(' ' || r.code, ''), ', ') AS faults,
       max(r.weeks) AS weeks, sum(r.events)::bigint AS events, sum(r.jobs_failed)::bigint AS jobs_failed,
       max(r.last_seen) AS last_seen
FROM attribution.recurring_faults r
WHERE r.gpu IS NOT NULL AND r.last_seen >= :since
GROUP BY r.cluster, r.node, r.gpu
ORDER BY weeks DESC, events DESC, jobs_failed DESC, r.cluster, r.node, r.gpu
LIMIT :limit"""

#: Events per week of the recurring faults, per node and GPU (the sparklines).
RECURRING_WEEKLY = """
SELECT e.cluster, e.node, e.gpu, (date_trunc('week', e.occurred_at AT TIME ZONE 'UTC'))::date AS week,
       count(*) AS events
FROM attribution.fault_events e
JOIN attribution.recurring_faults r
  ON r.cluster = e.cluster AND r.node = e.node_key AND r.node = e.node AND r.kind = e.kind
 AND r.gpu IS NOT DISTINCT FROM e.gpu AND r.code IS NOT DISTINCT FROM e.code
WHERE e.occurred_at >= :since AND e.occurred_at < :until AND e.role <> 'symptom'
GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4"""

#: Workloads that failed again on the same cause in the period (failure_recurrence), with what the repeats lost.
RECURRING_FAILURES = """
SELECT r.cluster, r.user_name, r.workload, r.workload_by, r.outcome, r.root_kind,
       max(r.failure_number) AS failures, min(r.first_job_id) AS first_job_id,
       (array_agg(r.job_id ORDER BY r.job_start DESC, r.job_ref DESC))[1] AS last_job_id,
       count(*) AS repeats_in_period,
       coalesce(sum(l.gpu_hours_lost), 0)::float AS repeats_lost_gpu_hours
FROM attribution.failure_recurrence r
LEFT JOIN attribution.lost_gpu_hours l ON l.job_ref = r.job_ref
WHERE coalesce(r.job_end, r.job_start) >= :since AND coalesce(r.job_end, r.job_start) < :until
GROUP BY r.cluster, r.user_name, r.workload, r.workload_by, r.outcome, r.root_kind
ORDER BY failures DESC, repeats_lost_gpu_hours DESC, r.cluster, r.workload, r.root_kind
LIMIT :limit"""

DRAIN_CANDIDATES = """
SELECT d.cluster, d.node, d.reason, d.evidence, d.score
FROM attribution.drain_candidates d
ORDER BY d.score DESC NULLS LAST, d.cluster, d.node
LIMIT :limit"""

STORED_JOB = """
SELECT v.job_ref, v.job_start, d.document
FROM attribution.job_verdicts v
JOIN attribution.verdicts d ON d.job_id = v.job_id AND d.id = v.verdict_id
WHERE v.cluster = :cluster AND v.job_id = :job_id AND (CAST(:start AS timestamptz) IS NULL OR v.job_start = :start)
ORDER BY v.job_start DESC"""



def week_range(weeks: int, until: datetime | None = None) -> tuple[datetime, datetime]:
    """The `weeks` ISO weeks (Monday 00:00 UTC) up to and including the week of `until` (default: now), as
    [since, until) instants."""
    if weeks < 1:
        raise ValueError("weeks must be at least 1")
    until = (until or datetime.now(UTC)).astimezone(UTC)
    monday = (until - timedelta(days=until.weekday())).date()
    end = datetime.combine(monday + timedelta(weeks=1), datetime.min.time(), UTC)
    return end - timedelta(weeks=weeks), end


@dataclass(frozen=True)
class FleetData:
    since: datetime
    until: datetime
    weeks: tuple[date, ...]
    totals: dict
    failed_jobs_weekly: list[dict] = field(default_factory=list)
    fault_events_weekly: list[dict] = field(default_factory=list)
    failed_gpu_hours: list[dict] = field(default_factory=list)
    recurring_nodes: list[dict] = field(default_factory=list)
    recurring_gpus: list[dict] = field(default_factory=list)
    recurring_weekly: list[dict] = field(default_factory=list)
    drain_candidates: list[dict] = field(default_factory=list)
    recurring_failures: list[dict] = field(default_factory=list)


def _rows(conn: Connection, sql: str, **params) -> list[dict]:
    return [dict(r) for r in conn.execute(text(sql), params).mappings()]


def fleet_data(engine: Engine, weeks: int = 8, until: datetime | None = None, top: int = 15) -> FleetData:
    """Everything the fleet report draws, for the `weeks` ISO weeks up to the week of `until`."""
    since, end = week_range(weeks, until)
    p = {"since": since, "until": end}
    with engine.connect().execution_options(isolation_level="REPEATABLE READ") as conn, conn.begin():
        return FleetData(
            since=since, until=end,
            weeks=tuple((since + timedelta(weeks=i)).date() for i in range(weeks)),
            totals=_rows(conn, TOTALS, **p)[0],
            failed_jobs_weekly=_rows(conn, FAILED_JOBS_WEEKLY, **p),
            fault_events_weekly=_rows(conn, FAULT_EVENTS_WEEKLY, **p),
            failed_gpu_hours=_rows(conn, FAILED_GPU_HOURS, **p),
            recurring_nodes=_rows(conn, RECURRING_NODES, since=since, limit=top),
            recurring_gpus=_rows(conn, RECURRING_GPUS, since=since, limit=top),
            recurring_weekly=_rows(conn, RECURRING_WEEKLY, **p),
            drain_candidates=_rows(conn, DRAIN_CANDIDATES, limit=200),
            recurring_failures=_rows(conn, RECURRING_FAILURES, **p, limit=top),
        )


@dataclass(frozen=True)
class StoredJob:
    document: dict
    events: list[Event]
    starts: tuple[datetime, ...]  # start times of every stored job with this id (ids wrap around)


def stored_job(engine: Engine, cluster: str, job_id: str, start: datetime | None = None) -> StoredJob:
    """The current verdict document and the events of a stored job (the newest start when the id was reused)."""
    with engine.connect().execution_options(isolation_level="REPEATABLE READ") as conn, conn.begin():
        found = conn.execute(text(STORED_JOB), {"cluster": cluster, "job_id": job_id, "start": start}).all()
        if not found:
            when = f" started {start.isoformat()}" if start else ""
            raise InputError(f"{cluster}/{job_id}", f"no job{when} with a verdict in the store")
        job_ref, _, document = found[0]
        events = [event_from_row(r) for r in job_event_rows(conn, job_id, job_ref, EVENT_ROW)]
    return StoredJob(document=dict(document), events=events, starts=tuple(r[1] for r in found))
