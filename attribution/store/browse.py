"""Browsing the store: the job list with filters and keyset paging, and one node's history.

What the dashboard and `/v1/jobs`, `/v1/nodes/{cluster}/{node}` answer from. Plain functions over a Connection;
rows come back JSON-ready (times as ISO 8601 UTC text). Every query is bounded by its LIMIT and served by an
index (migrations 0009 and 0013): the list walks jobs newest first on (job time, id) and stops at the page size, so a page
costs the same with a thousand jobs or a million.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, text

from attribution.errors import InputError
from attribution.store.reads import json_row
from attribution.timeparse import format_utc, parse_iso, TimeError

#: The time a job is listed by: its end, its start while it has none (the index of migration 0009 is on it).
JOB_TIME = "coalesce(j.end_time, j.start_time)"
#: `outcome=failed` in a filter: every job whose verdict is not `none` (the fleet report counts the same).
FAILED = "failed"
INFRASTRUCTURE = ("gpu_hardware", "nvlink", "nvswitch_fabric", "network", "host")


@dataclass(frozen=True)
class JobFilter:
    """What the job list is narrowed to; None means any."""

    cluster: str | None = None
    outcome: str | None = None  # an outcome, or "failed"
    node: str | None = None  # the job ran on it
    user: str | None = None
    since: datetime | None = None  # job time >= since
    until: datetime | None = None  # job time < until


@dataclass(frozen=True)
class Cursor:
    """Where the next page starts: strictly older than (time, job ref)."""

    time: datetime
    ref: int

    def encode(self) -> str:
        raw = f"{format_utc(self.time)}|{self.ref}".encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, value: str) -> "Cursor":
        try:
            raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).decode()
            when, ref = raw.rsplit("|", 1)
            return cls(parse_iso(when), int(ref))
        except (binascii.Error, UnicodeDecodeError, ValueError, TimeError):
            raise InputError("after", "not a cursor this service gave out") from None


JOB_COLUMNS = f"""
SELECT j.id AS job_ref, j.cluster, j.job_id, j.start_time AS job_start, j.end_time AS job_end,
       {JOB_TIME} AS job_time, j.state, j.exit_code, j.user_name, j.partition, cardinality(j.nodes) AS node_count,
       j.gpus_per_node, v.outcome, v.action, v.confidence, v.root_kind, v.root_code, v.root_node, v.root_gpu,
       v.root_time, v.culprit_nodes, v.explanation
FROM attribution.jobs j
LEFT JOIN attribution.verdicts v ON v.job_id = j.job_id AND v.id = j.current_verdict_id"""


def list_jobs(conn: Connection, where: JobFilter, limit: int = 50,
              after: Cursor | None = None) -> tuple[list[dict], Cursor | None]:
    """One page of jobs, newest first, and the cursor of the next page (None on the last)."""
    clauses: list[str] = []
    params: dict[str, Any] = {"lim": limit + 1}
    if where.cluster is not None:
        clauses.append("j.cluster = :cluster")
        params["cluster"] = where.cluster
    if where.outcome == FAILED:
        clauses.append("j.current_outcome IS DISTINCT FROM 'none'")
    elif where.outcome is not None:
        clauses.append("j.current_outcome = :outcome")
        params["outcome"] = where.outcome
    if where.node is not None:
        clauses.append("j.nodes @> ARRAY[CAST(:node AS text)]")
        params["node"] = where.node
    if where.user is not None:
        clauses.append("j.user_name = :user")
        params["user"] = where.user
    if where.since is not None:
        clauses.append(f"{JOB_TIME} >= :since")
        params["since"] = where.since
    if where.until is not None:
        clauses.append(f"{JOB_TIME} < :until")
        params["until"] = where.until
    if after is not None:
        clauses.append(f"({JOB_TIME}, j.id) < (:after_time, :after_ref)")
        params.update(after_time=after.time, after_ref=after.ref)
    sql = JOB_COLUMNS + (" WHERE " + " AND ".join(clauses) if clauses else "")
    sql += f" ORDER BY {JOB_TIME} DESC, j.id DESC LIMIT :lim"
    rows = conn.execute(text(sql), params).mappings().all()
    page = rows[:limit]
    nxt = Cursor(page[-1]["job_time"], page[-1]["job_ref"]) if len(rows) > limit else None
    return [json_row(r) for r in page], nxt


NODE_FAULTS_WEEKLY = """
SELECT (date_trunc('week', e.occurred_at AT TIME ZONE 'UTC'))::date AS week, e.kind, e.code,
       count(*) AS events
FROM attribution.events e
WHERE e.node_key = :node AND e.cluster = :cluster AND e.node = :node AND e.occurred_at >= :since AND e.role = 'cause'
GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"""

NODE_RECURRING = """
SELECT gpu, kind, code, first_seen, last_seen, weeks, events, jobs_failed
FROM attribution.recurring_faults WHERE cluster = :cluster AND node = :node
ORDER BY weeks DESC, events DESC, kind, gpu NULLS FIRST"""

NODE_FAILED_JOBS = f"""
SELECT j.id AS job_ref, j.cluster, j.job_id, j.start_time AS job_start, j.end_time AS job_end,
       {JOB_TIME} AS job_time, j.state, j.user_name, v.outcome, v.root_kind, v.root_code, v.root_node,
       v.culprit_nodes, (CAST(:node AS text) = ANY (v.culprit_nodes)) AS culprit
FROM attribution.jobs j
JOIN attribution.verdicts v ON v.job_id = j.job_id AND v.id = j.current_verdict_id
WHERE j.cluster = :cluster AND j.nodes @> ARRAY[CAST(:node AS text)] AND v.outcome <> 'none'
  AND {JOB_TIME} >= :since
ORDER BY {JOB_TIME} DESC, j.id DESC LIMIT :lim"""

NODE_DRAINS = """
SELECT at, decision, reason, detail, actor FROM attribution.drain_actions
WHERE cluster = :cluster AND node = :node ORDER BY at DESC, id DESC LIMIT :lim"""

NODE_CANDIDATE = """
SELECT reason, score, evidence FROM attribution.drain_candidates WHERE cluster = :cluster AND node = :node"""

NODE_RESUMED = "SELECT resumed_at FROM attribution.node_resumes WHERE cluster = :cluster AND node = :node"

#: Each GPU's counters as its newest epilog snapshot showed them (the view's DISTINCT ON keys take the filter).
NODE_GPU_COUNTERS = """
SELECT gpu, product, uuid, serial, driver, taken_at, last_job_id, remapped_rows_uncorrectable,
       remapped_rows_correctable, remap_pending, remap_failure, ecc_aggregate_uncorrectable,
       ecc_aggregate_dram_correctable, retired_pages_dbe, retirement_pending, pcie_replays, reset_required
FROM attribution.gpu_counters_latest WHERE cluster = :cluster AND node = :node ORDER BY gpu LIMIT :lim"""

#: Each InfiniBand port's newest epilog counters (index on cluster, node, device_kind, device, taken_at).
NODE_PORT_COUNTERS = """
SELECT DISTINCT ON (d.device) d.device AS port, d.taken_at, d.job_id AS last_job_id, d.counters
FROM attribution.device_counters d
WHERE d.cluster = :cluster AND d.node = :node AND d.device_kind = 'ib_port' AND d.phase = 'epilog'
ORDER BY d.device, d.taken_at DESC NULLS LAST, d.stored_at DESC LIMIT :lim"""

#: The node's counter-derived events (rules/counters.yaml), newest first, each with one job that saw it.
NODE_COUNTER_EVENTS = """
SELECT e.occurred_at, e.kind, e.role, e.outcome, e.gpu, e.fields ->> 'device' AS device, e.rule, e.message,
       e.fields ->> 'window' AS window, CASE WHEN l.job_ref IS NOT NULL THEN e.cluster END AS cluster, l.job_id,
       l.job_ref
FROM attribution.events e
-- the first job that saw the event, from its links kept beside it (event_jobs, by node_key: on the event's shard)
LEFT JOIN LATERAL (
    SELECT min(ej.job_ref) AS job_ref, (array_agg(ej.job_id ORDER BY ej.job_ref))[1] AS job_id
    FROM attribution.event_jobs ej WHERE ej.node_key = e.node_key AND ej.event_id = e.id) l ON true
WHERE e.node_key = :node AND e.cluster = :cluster AND e.node = :node AND e.source = :source
  AND e.occurred_at >= :since
ORDER BY e.occurred_at DESC, e.id DESC LIMIT :lim"""
#: The start of each job a counter event names (routed by job_id), for the links to the job's page.
JOB_STARTS = """
SELECT job_id, id, start_time FROM attribution.jobs
WHERE job_id = ANY (CAST(:jids AS text[])) AND id = ANY (CAST(:refs AS bigint[]))"""
#: What the counter rules' events are stored under (extract.counters.TELEMETRY_SOURCE; the store imports no
#: extract module)
TELEMETRY_SOURCE = "telemetry"


def node_telemetry(conn: Connection, cluster: str, node: str, since: datetime, limit: int = 200) -> dict:
    """The node's telemetry: the newest counters of each GPU and InfiniBand port, and its counter events since
    `since` (newest first, at most `limit`)."""
    p = {"cluster": cluster, "node": node, "since": since, "lim": limit}
    gpus = [json_row(r) for r in conn.execute(text(NODE_GPU_COUNTERS), p).mappings()]
    ports = [json_row(r) for r in conn.execute(text(NODE_PORT_COUNTERS), p).mappings()]
    rows = conn.execute(text(NODE_COUNTER_EVENTS), {**p, "source": TELEMETRY_SOURCE, "lim": limit + 1}).mappings().all()
    refs = sorted({(r["job_id"], r["job_ref"]) for r in rows[:limit] if r["job_ref"] is not None})
    starts = {(j, i): t for j, i, t in conn.execute(text(JOB_STARTS), {
        "jids": [j for j, _ in refs], "refs": [i for _, i in refs]})} if refs else {}
    events = []
    for r in rows[:limit]:
        row = {k: v for k, v in r.items() if k != "job_ref"}
        row["job_start"] = starts.get((r["job_id"], r["job_ref"]))
        events.append(json_row(row))
    return {"gpu_counters": gpus, "port_counters": ports, "counter_events": events,
            "counter_events_truncated": len(rows) > limit}


def node_history(conn: Connection, cluster: str, node: str, now: datetime, days: int = 91,
                 limit: int = 200) -> dict:
    """Everything the store knows that one node did wrong in the last `days` days: its cause events by ISO week
    and kind, its recurring faults, the failed jobs it ran (culprit or not), its drain decisions and resumes,
    whether the drain policy names it now and why (or why not: each condition's progress, drain.explain), its
    life (boots, drains and resumes, Slurm's last view of it) and its telemetry counters (node_telemetry)."""
    from attribution.drain.explain import summary
    from attribution.store.drain import node_progress
    from attribution.store.node_life import node_life, node_state

    since = now - timedelta(days=days)
    p = {"cluster": cluster, "node": node, "since": since, "lim": limit}
    weekly = [json_row(r) for r in conn.execute(text(NODE_FAULTS_WEEKLY), p).mappings()]
    recurring = [json_row(r) for r in conn.execute(text(NODE_RECURRING), p).mappings()]
    jobs_rows = conn.execute(text(NODE_FAILED_JOBS), {**p, "lim": limit + 1}).mappings().all()
    drains = [json_row(r) for r in conn.execute(text(NODE_DRAINS), p).mappings()]
    candidate = conn.execute(text(NODE_CANDIDATE), p).mappings().first()
    resumed = conn.execute(text(NODE_RESUMED), p).scalar()
    conditions = node_progress(conn, cluster, node, now)
    state = node_state(conn, cluster, node)
    return {
        "cluster": cluster, "node": node, "since": format_utc(since), "until": format_utc(now),
        "faults_weekly": weekly, "recurring_faults": recurring,
        "failed_jobs": [json_row(r) for r in jobs_rows[:limit]], "failed_jobs_truncated": len(jobs_rows) > limit,
        "drain_actions": drains, "drain_candidate": None if candidate is None else json_row(candidate),
        "resumed_at": None if resumed is None else format_utc(resumed),
        "drain_conditions": [json_row(p.to_dict()) for p in conditions],
        "drain_summary": summary(conditions) if conditions else None,
        "life": [json_row(r) for r in node_life(conn, cluster, node, since, limit)],
        "slurm_state": None if state is None else json_row(state),
        **node_telemetry(conn, cluster, node, since, limit),
    }


def clusters(conn: Connection) -> list[str]:
    """The clusters the store has jobs of (for the filter's choices): a loose index scan, not a full one."""
    sql = """
    WITH RECURSIVE c AS (
        (SELECT cluster FROM attribution.jobs ORDER BY cluster LIMIT 1)
        UNION ALL
        SELECT (SELECT j.cluster FROM attribution.jobs j WHERE j.cluster > c.cluster ORDER BY j.cluster LIMIT 1)
        FROM c WHERE c.cluster IS NOT NULL)
    SELECT cluster FROM c WHERE cluster IS NOT NULL"""
    if conn.execute(text("SELECT to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL")).scalar():
        # Citus refuses a recursive CTE over a distributed table; each shard answers its own DISTINCT instead
        sql = "SELECT DISTINCT cluster FROM attribution.jobs ORDER BY cluster"
    return [r[0] for r in conn.execute(text(sql))]


def node_clusters(conn: Connection, node: str) -> list[str]:
    """The clusters that have a job on this node (a node name alone may be ambiguous across clusters)."""
    rows = conn.execute(text("SELECT DISTINCT cluster FROM attribution.jobs WHERE nodes @> ARRAY[CAST(:n AS text)] "
                             "ORDER BY cluster"), {"n": node})
    return [r[0] for r in rows]
