"""The store's side of alerting: what is new since the last run (a cursor per stream), claiming an alert key for a
cooldown atomically, what each alert owes each sink (alert_deliveries), and the lock that lets one `alerts send`
run at a time."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Iterable, Mapping

from sqlalchemy import Connection, text

VERDICTS = """
SELECT v.id, j.cluster, j.job_id, v.outcome, v.action, v.confidence, v.root_kind, v.root_code, v.root_node,
       v.culprit_nodes, v.culprit_evidence, v.explanation, (j.current_verdict_id = v.id) AS current
FROM attribution.verdicts v JOIN attribution.jobs j ON j.job_id = v.job_id AND j.id = v.job_ref
WHERE v.id > :after ORDER BY v.id LIMIT :lim"""

DRAINS = """
SELECT id, cluster, node, decision, reason, detail, actor FROM attribution.drain_actions
WHERE id > :after ORDER BY id LIMIT :lim"""

#: pg_advisory_lock key of `attribution alerts send` (one run at a time per database)
ALERT_LOCK = 7_261_432_011

#: Drain decisions worth telling a person about (a skipped one changed nothing).
DRAIN_DECISIONS = ("applied", "capped", "failed", "resumed")


def cursor(conn: Connection, stream: str) -> int:
    return conn.execute(text("SELECT last_id FROM attribution.alert_cursors WHERE stream = :s"),
                        {"s": stream}).scalar() or 0


def advance(conn: Connection, stream: str, last_id: int) -> None:
    conn.execute(text(
        "INSERT INTO attribution.alert_cursors (stream, last_id) VALUES (:s, :i) "
        "ON CONFLICT (stream) DO UPDATE SET last_id = greatest(alert_cursors.last_id, excluded.last_id)"),
        {"s": stream, "i": last_id})


def new_verdicts(conn: Connection, after: int, limit: int) -> list[dict]:
    return [dict(r) for r in conn.execute(text(VERDICTS), {"after": after, "lim": limit}).mappings()]


def new_drain_actions(conn: Connection, after: int, limit: int) -> list[dict]:
    return [dict(r) for r in conn.execute(text(DRAINS), {"after": after, "lim": limit}).mappings()]


def claim(conn: Connection, key: str, cooldown_seconds: int, now: datetime) -> bool:
    """True when no alert with this key was decided within the cooldown before `now` (and records that one is
    decided now)."""
    row = conn.execute(text(
        "INSERT INTO attribution.alert_keys (key, sent_at) VALUES (:k, :now) "
        "ON CONFLICT (key) DO UPDATE SET sent_at = excluded.sent_at "
        "WHERE alert_keys.sent_at <= excluded.sent_at - make_interval(secs => :cd) RETURNING key"),
        {"k": key, "cd": cooldown_seconds, "now": now}).first()
    return row is not None


def queue(conn: Connection, key: str, alert: Mapping, sinks: Iterable[str], now: datetime) -> None:
    """One pending delivery of `alert` (a JSON-able mapping) to each of `sinks`, due now."""
    conn.execute(text(
        "INSERT INTO attribution.alert_deliveries (key, sink, alert, created_at, next_attempt_at) "
        "SELECT :k, s, CAST(:a AS jsonb), :now, :now FROM unnest(CAST(:sinks AS text[])) AS s"),
        {"k": key, "a": json.dumps(alert), "now": now, "sinks": list(sinks)})


def due(conn: Connection, now: datetime, after: int, skip: Iterable[str], limit: int) -> list[dict]:
    """The pending deliveries due by `now`, oldest first, with ids above `after`, to sinks not in `skip`."""
    return [dict(r) for r in conn.execute(text(
        "SELECT id, key, sink, alert, created_at, attempts FROM attribution.alert_deliveries "
        "WHERE delivered_at IS NULL AND gave_up_at IS NULL AND id > :after AND next_attempt_at <= :now "
        "AND sink <> ALL(CAST(:skip AS text[])) ORDER BY id LIMIT :lim"),
        {"now": now, "after": after, "skip": list(skip), "lim": limit}).mappings()]


def delivered(conn: Connection, delivery_id: int, now: datetime) -> None:
    conn.execute(text("UPDATE attribution.alert_deliveries SET delivered_at = :now, attempts = attempts + 1 "
                      "WHERE id = :i"), {"i": delivery_id, "now": now})


def failed(conn: Connection, delivery_id: int, error: str, retry_at: datetime | None, now: datetime) -> None:
    """A delivery that failed: tried again at `retry_at`, or given up (None). `error` has no credential in it."""
    conn.execute(text(
        "UPDATE attribution.alert_deliveries SET attempts = attempts + 1, last_error = :e, "
        "next_attempt_at = coalesce(:retry, next_attempt_at), "
        "gave_up_at = CASE WHEN CAST(:retry AS timestamptz) IS NULL THEN CAST(:now AS timestamptz) END "
        "WHERE id = :i"), {"i": delivery_id, "e": error, "retry": retry_at, "now": now})


def pending(conn: Connection) -> dict[str, int]:
    """Deliveries still owed, per sink."""
    return {r[0]: r[1] for r in conn.execute(text(
        "SELECT sink, count(*) FROM attribution.alert_deliveries WHERE delivered_at IS NULL AND gave_up_at IS NULL "
        "GROUP BY sink"))}


def try_lock(conn: Connection) -> bool:
    """Take the session's alerting lock, or False when another run holds it."""
    return bool(conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": ALERT_LOCK}).scalar())


def unlock(conn: Connection) -> None:
    conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": ALERT_LOCK})
