"""The store's side of alerting: what is new since the last run (a cursor per stream), claiming an alert key for a
cooldown atomically, and the lock that lets one `alerts send` run at a time."""

from __future__ import annotations

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


def claim(conn: Connection, key: str, cooldown_seconds: int) -> bool:
    """True when no alert with this key was sent within the cooldown (and records that one is sent now)."""
    row = conn.execute(text(
        "INSERT INTO attribution.alert_keys (key, sent_at) VALUES (:k, statement_timestamp()) "
        "ON CONFLICT (key) DO UPDATE SET sent_at = excluded.sent_at "
        "WHERE alert_keys.sent_at <= excluded.sent_at - make_interval(secs => :cd) RETURNING key"),
        {"k": key, "cd": cooldown_seconds}).first()
    return row is not None


def release(conn: Connection, key: str) -> None:
    """Forget a claim whose delivery failed, so the next run tries again."""
    conn.execute(text("DELETE FROM attribution.alert_keys WHERE key = :k"), {"k": key})


def try_lock(conn: Connection) -> bool:
    """Take the session's alerting lock, or False when another run holds it."""
    return bool(conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": ALERT_LOCK}).scalar())


def unlock(conn: Connection) -> None:
    conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": ALERT_LOCK})
