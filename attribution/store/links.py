"""Where an event lives and how a job finds its events: the two co-location groups of the store (docs/store.md).

The per-job tables are keyed by the job's `job_id`, the per-node ones by the event's `node_key`; a job's links to
its events (job_events) carry both keys, so reading a job's events is two routed reads (the job's links on the
job's shard, then the events on their nodes' shards), never a join between the groups.
"""

from __future__ import annotations

from typing import Sequence

from sqlalchemy import Connection, text

from attribution.model import Event

#: The columns (over `e`, the events table) that codec.event_from_row reads back into an Event.
EVENT_ROW = ("e.kind, e.role, e.rule, e.source, e.location, e.line, e.message, e.node, e.gpu, e.code, e.rank, "
             "CASE WHEN e.time_exact THEN e.occurred_at END, e.outcome, e.action, e.severity, e.fields")
#: Sources whose lines belong to one job (a job's output, the scheduler's word on it).
JOB_SCOPED_SOURCES = frozenset({"job", "scheduler"})


def node_key(cluster: str, job_id: str, ev: Event) -> str:
    """The distribution key of an event: its node; a job-scoped line without a node belongs to its job
    (`<cluster>/<job id>`, which no node name can be: node names have no '/'); anything else to its cluster."""
    if ev.node:
        return ev.node
    if ev.source in JOB_SCOPED_SOURCES:
        return f"{cluster}/{job_id}"
    return cluster


def job_event_rows(conn: Connection, job_id: str, job_ref: int, columns: str) -> list[Sequence]:
    """`columns` (over `e`, the events table) of every event linked to the job, oldest first."""
    links = conn.execute(text(
        "SELECT node_key, event_id, event_time FROM attribution.job_events WHERE job_id = :j AND job_ref = :r"),
        {"j": job_id, "r": job_ref}).all()
    if not links:
        return []
    return conn.execute(text(
        f"SELECT {columns} FROM attribution.events e "
        "JOIN unnest(CAST(:keys AS text[]), CAST(:ids AS bigint[])) AS l(node_key, event_id) "
        "  ON e.node_key = l.node_key AND e.id = l.event_id "
        "WHERE e.node_key = ANY(CAST(:ukeys AS text[])) AND e.occurred_at >= :lo AND e.occurred_at <= :hi "
        "ORDER BY e.occurred_at, e.id"),
        {"keys": [r[0] for r in links], "ids": [r[1] for r in links], "ukeys": sorted({r[0] for r in links}),
         "lo": min(r[2] for r in links), "hi": max(r[2] for r in links)}).all()


__all__ = ["EVENT_ROW", "JOB_SCOPED_SOURCES", "node_key", "job_event_rows"]
