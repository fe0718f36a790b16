"""The Kueue watcher's state (migration 0022): the resourceVersion each watched collection was handled up to, and
which runs (workload UID and attempt) have their verdict stored. A restarted watcher resumes from the bookmark; a
run found stored is never diagnosed again."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Engine, text

from attribution.store import in_transaction


def load_bookmark(engine: Engine, cluster: str, resource: str) -> str | None:
    """The resourceVersion `resource` was handled up to on `cluster`, or None (never watched)."""
    def read(conn):
        return conn.execute(text("SELECT resource_version FROM attribution.kueue_watch_bookmarks "
                                 "WHERE cluster = :c AND resource = :r"), {"c": cluster, "r": resource}).scalar()
    return in_transaction(engine, read)


def save_bookmark(engine: Engine, cluster: str, resource: str, resource_version: str) -> None:
    def write(conn):
        conn.execute(text(
            "INSERT INTO attribution.kueue_watch_bookmarks (cluster, resource, resource_version, updated_at) "
            "VALUES (:c, :r, :v, now()) ON CONFLICT (cluster, resource) "
            "DO UPDATE SET resource_version = EXCLUDED.resource_version, updated_at = now()"),
            {"c": cluster, "r": resource, "v": resource_version})
    in_transaction(engine, write)


def stored_attempts(engine: Engine, cluster: str, uid: str) -> dict[str, tuple[int, str]]:
    """The stored runs of one workload: attempt key -> (attempt number, job id)."""
    def read(conn):
        rows = conn.execute(text("SELECT attempt_key, attempt, job_id FROM attribution.kueue_watch_attempts "
                                 "WHERE cluster = :c AND workload_uid = :u"), {"c": cluster, "u": uid}).all()
        return {k: (n, j) for k, n, j in rows}
    return in_transaction(engine, read)


def record_attempt(engine: Engine, cluster: str, uid: str, key: str, attempt: int, namespace: str, name: str,
                   job_id: str, outcome: str | None, ended_at: datetime | None) -> bool:
    """Mark a run stored (after its verdict was: a crash in between stores it again, which ingest makes a no-op).
    False when it was marked already."""
    def write(conn):
        return conn.execute(text(
            "INSERT INTO attribution.kueue_watch_attempts (cluster, workload_uid, attempt_key, attempt, namespace, "
            "name, job_id, outcome, ended_at) VALUES (:c, :u, :k, :n, :ns, :name, :j, :o, :e) "
            "ON CONFLICT DO NOTHING RETURNING attempt"),
            {"c": cluster, "u": uid, "k": key, "n": attempt, "ns": namespace, "name": name, "j": job_id,
             "o": outcome, "e": ended_at}).scalar() is not None
    return in_transaction(engine, write)


def attempts_of(engine: Engine, cluster: str | None = None) -> list[dict]:
    """Every stored run (for status and tests), oldest end first."""
    def read(conn):
        rows = conn.execute(text(
            "SELECT cluster, workload_uid, attempt_key, attempt, namespace, name, job_id, outcome, ended_at "
            "FROM attribution.kueue_watch_attempts WHERE CAST(:c AS text) IS NULL OR cluster = :c "
            "ORDER BY ended_at NULLS LAST, namespace, name, attempt"), {"c": cluster}).mappings().all()
        return [dict(r) for r in rows]
    return in_transaction(engine, read)


__all__ = ["load_bookmark", "save_bookmark", "stored_attempts", "record_attempt", "attempts_of"]
