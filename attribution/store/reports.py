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

#: The recurring faults (two or more ISO weeks in their whole history) seen in the period, counted in the period
#: only: the weeks and events of the report's weeks (what the sparklines draw) and the period's failed jobs whose
#: root cause was that fault; first_seen is the fault's first event ever. Grouped per node, or per node and GPU.
RECURRING_IN_PERIOD = f"""
WITH r AS (
    SELECT cluster, node, gpu, kind, code, first_seen FROM attribution.recurring_faults WHERE last_seen >= :since),
e AS (
    SELECT r.cluster, r.node, r.gpu, r.kind, r.code, r.first_seen, e.occurred_at,
           (date_trunc('week', e.occurred_at AT TIME ZONE 'UTC'))::date AS week
    FROM attribution.fault_events e
    JOIN r ON r.cluster = e.cluster AND r.node = e.node_key AND r.node = e.node AND r.kind = e.kind
          AND r.gpu IS NOT DISTINCT FROM e.gpu AND r.code IS NOT DISTINCT FROM e.code
    WHERE e.occurred_at >= :since AND e.occurred_at < :until AND e.role <> 'symptom'),
f AS (SELECT DISTINCT cluster, node, gpu, kind, code FROM e),
-- the period's failed jobs whose root cause was one of these faults, read once (not once per row of g)
j AS MATERIALIZED (
    SELECT f.cluster, f.node, f.gpu, count(*) AS jobs
    FROM attribution.job_verdicts v
    JOIN f ON v.cluster = f.cluster AND v.root_node = f.node AND v.root_kind = f.kind
          AND v.root_gpu IS NOT DISTINCT FROM f.gpu AND v.root_code IS NOT DISTINCT FROM f.code
    WHERE {FAILED} AND {JOB_TIME} >= :since AND {JOB_TIME} < :until
    GROUP BY 1, 2, 3),
g AS (
    SELECT e.cluster, e.node, {{gpu}}string_agg(DISTINCT e.kind || coalesce(' ' || e.code, ''), ', ') AS faults,
           count(DISTINCT e.week) AS weeks, count(*) AS events, min(e.first_seen) AS first_seen,
           max(e.occurred_at) AS last_seen
    FROM e {{where}}
    GROUP BY e.cluster, e.node{{gpu_group}})
SELECT g.cluster, g.node, {{gpu_g}}g.faults, g.weeks, g.events,
       (SELECT coalesce(sum(j.jobs), 0) FROM j WHERE j.cluster = g.cluster AND j.node = g.node{{gpu_match}})::bigint
           AS jobs_failed,
       g.first_seen, g.last_seen
FROM g
ORDER BY weeks DESC, events DESC, jobs_failed DESC, g.cluster, g.node{{gpu_order}}
LIMIT :limit"""
RECURRING_NODES = RECURRING_IN_PERIOD.format(gpu="", gpu_g="", gpu_match="", where="", gpu_group="", gpu_order="")
RECURRING_GPUS = RECURRING_IN_PERIOD.format(gpu="e.gpu, ", gpu_g="g.gpu, ", gpu_match=" AND j.gpu = g.gpu",
                                            where="WHERE e.gpu IS NOT NULL", gpu_group=", e.gpu",
                                            gpu_order=", g.gpu")

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
            recurring_nodes=_rows(conn, RECURRING_NODES, **p, limit=top),
            recurring_gpus=_rows(conn, RECURRING_GPUS, **p, limit=top),
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
