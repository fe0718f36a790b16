"""The node inbox's rows (migration 0018): what the central drain reads, takes and sets aside.

Nodes put reports in through `attribution.submit_report(payload)` (node/pgwire.py); the drain (pipeline.drain_inbox)
reads a batch oldest first, and takes each row in the transaction that stores it (`take`: a DELETE that locks the
row; a second drain at the same row waits for the first one's commit and then finds nothing), so a report is
ingested exactly once however many drains run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, text


@dataclass(frozen=True)
class Queued:
    job_id: str
    digest: bytes
    payload: dict
    received_at: datetime
    submitted_by: str


def queued(conn: Connection, limit: int) -> list[Queued]:
    """Up to `limit` reports not set aside, oldest first."""
    rows = conn.execute(text(
        "SELECT job_id, digest, payload, received_at, submitted_by FROM attribution.inbox_reports "
        "WHERE refused IS NULL ORDER BY received_at, job_id, digest LIMIT :n"), {"n": limit}).all()
    return [Queued(r[0], bytes(r[1]), r[2], r[3], r[4]) for r in rows]


def take(conn: Connection, job_id: str, digest: bytes) -> bool:
    """Delete the row in the caller's transaction; False when another drain took it already."""
    return conn.execute(text(
        "DELETE FROM attribution.inbox_reports WHERE job_id = :j AND digest = :d AND refused IS NULL "
        "RETURNING 1"), {"j": job_id, "d": digest}).first() is not None


def refuse(conn: Connection, job_id: str, digest: bytes, reason: str) -> None:
    """Set a row aside with the reason: it can never be stored (the spool's `bad/`)."""
    conn.execute(text("UPDATE attribution.inbox_reports SET refused = :r WHERE job_id = :j AND digest = :d"),
                 {"r": reason[:2000], "j": job_id, "d": digest})


def counts(conn: Connection) -> tuple[int, int]:
    """(waiting, set aside)."""
    row = conn.execute(text("SELECT count(*) FILTER (WHERE refused IS NULL), count(*) FILTER (WHERE refused "
                            "IS NOT NULL) FROM attribution.inbox_reports")).first()
    return int(row[0]), int(row[1])


__all__ = ["Queued", "queued", "take", "refuse", "counts"]
