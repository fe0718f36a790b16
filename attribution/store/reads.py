"""Reads the service answers from: a job's current verdict document, a node's events, the fleet views.

Plain functions over a Connection; rows come back as JSON-ready dicts (times as ISO 8601 UTC text).
"""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Any, Mapping

from sqlalchemy import Connection, text

from attribution.store.jobs import SAME_JOB_WINDOW
from attribution.timeparse import format_utc


def schema_ready(conn: Connection) -> bool:
    """The database answers and carries the attribution schema."""
    return conn.execute(text("SELECT to_regclass('attribution.jobs') IS NOT NULL")).scalar_one()


def current_verdict(conn: Connection, cluster: str, job_id: str, start: datetime | None = None) -> dict | None:
    """The current verdict document of the job (the newest one with this id, or the one nearest `start`)."""
    got = verdict_state(conn, cluster, job_id, start)
    return None if got is None else got[0]


def verdict_state(conn: Connection, cluster: str, job_id: str,
                  start: datetime | None = None) -> tuple[dict, bool] | None:
    """(the current verdict document, whether evidence stored since awaits attribution) of the job (the newest
    one with this id, or the one nearest `start`); None without a verdict. Pending: a report arrived within the
    service's settle interval, or an attributing process was killed (db attribute-pending takes it)."""
    head = ("SELECT v.document, j.evidence_seq > j.attributed_seq FROM attribution.jobs j JOIN attribution.verdicts v "
            "ON v.job_id = j.job_id AND v.id = j.current_verdict_id ")
    if start is None:
        row = conn.execute(text(
            head + "WHERE j.cluster = :c AND j.job_id = :j ORDER BY j.start_time DESC, j.id DESC LIMIT 1"),
            {"c": cluster, "j": job_id}).first()
    else:
        row = conn.execute(text(
            head + "WHERE j.cluster = :c AND j.job_id = :j AND j.start_time BETWEEN :lo AND :hi "
            "ORDER BY abs(extract(epoch FROM j.start_time - :s)), j.id LIMIT 1"),
            {"c": cluster, "j": job_id, "s": start, "lo": start - SAME_JOB_WINDOW,
             "hi": start + SAME_JOB_WINDOW}).first()
    return None if row is None else (row[0], bool(row[1]))


def node_events(conn: Connection, cluster: str, node: str, since: datetime, until: datetime | None,
                limit: int) -> tuple[list[dict], bool]:
    """A node's distinct fault events from `since` (inclusive) to `until` (exclusive), oldest first; and whether
    there were more than `limit`."""
    rows = conn.execute(text(
        "SELECT occurred_at AS time, time_exact, kind, code, role, gpu, source, severity, outcome, action, rule, "
        "message, line, jobs FROM attribution.fault_events "
        "WHERE cluster = :c AND node = :n AND node_key = :n AND occurred_at >= :since "
        "AND (CAST(:until AS timestamptz) IS NULL OR occurred_at < :until) "
        "ORDER BY occurred_at, event_id LIMIT :lim"),
        {"c": cluster, "n": node, "since": since, "until": until, "lim": limit + 1}).mappings().all()
    return [json_row(r) for r in rows[:limit]], len(rows) > limit


def view_rows(conn: Connection, view: str, filters: Mapping[str, str | None], order: str,
              limit: int) -> tuple[list[dict], bool]:
    """Rows of one of the public views, filtered by equality on the given columns."""
    if view not in ("recurring_faults", "drain_candidates"):
        raise ValueError(f"not a view the service reads: {view}")
    where = [f"{col} = :{col}" for col, v in filters.items() if v is not None]
    params: dict[str, Any] = {col: v for col, v in filters.items() if v is not None}
    params["lim"] = limit + 1
    sql = f"SELECT * FROM attribution.{view}"
    if where:
        sql += " WHERE " + " AND ".join(where)
    rows = conn.execute(text(f"{sql} ORDER BY {order} LIMIT :lim"), params).mappings().all()
    return [json_row(r) for r in rows[:limit]], len(rows) > limit


def json_row(row: Mapping[str, Any]) -> dict:
    return {k: _json_value(v) for k, v in row.items()}


def _json_value(v: Any) -> Any:
    if isinstance(v, datetime):
        return format_utc(v)
    if isinstance(v, date):
        return v.isoformat()
    if isinstance(v, Decimal):
        return float(v)
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    if isinstance(v, dict):
        return json_row(v)
    return v
