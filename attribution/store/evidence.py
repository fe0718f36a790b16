"""The evidence kept for replay (attribution.replay.keep makes the document): written in the transaction that
stores the job's events, read back by `rules diff`, `reattribute` and `rules suggest`. Deleted with its job (ON
DELETE CASCADE). Keyed by (job_id, job_ref) like every per-job table."""

from __future__ import annotations

import json
import zlib
from typing import Iterator

from sqlalchemy import Connection, text

COMPRESSION_LEVEL = 6


def encode(doc: dict) -> tuple[bytes, int]:
    raw = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return zlib.compress(raw, COMPRESSION_LEVEL), len(raw)


def decode(blob: bytes) -> dict:
    return json.loads(zlib.decompress(bytes(blob)).decode("utf-8"))


def line_count(doc: dict) -> int:
    """The kept lines: of the files and of the connectors' streams."""
    return sum(len(f["lines"]) for key in ("files", "streams") for f in doc.get(key, ()))


def save_evidence(conn: Connection, job_id: str, job_ref: int, doc: dict) -> None:
    """Store (or replace: the latest bundle of a job holds all of it) the job's kept evidence."""
    blob, raw = encode(doc)
    conn.execute(text(
        "INSERT INTO attribution.job_evidence (job_id, job_ref, format, lines, raw_bytes, truncated, document) "
        "VALUES (:id, :j, :f, :n, :r, :t, :d) ON CONFLICT (job_id, job_ref) DO UPDATE SET format = excluded.format, "
        "lines = excluded.lines, raw_bytes = excluded.raw_bytes, truncated = excluded.truncated, "
        "document = excluded.document, stored_at = excluded.stored_at"),
        {"id": job_id, "j": job_ref, "f": int(doc.get("format", 1)), "n": line_count(doc), "r": raw,
         "t": bool(doc.get("truncated")), "d": blob})


def load_evidence(conn: Connection, job_id: str, job_ref: int) -> dict | None:
    blob = conn.execute(text("SELECT document FROM attribution.job_evidence WHERE job_id = :id AND job_ref = :j"),
                        {"id": job_id, "j": job_ref}).scalar()
    return None if blob is None else decode(blob)


def evidence_size(conn: Connection) -> dict | None:
    """Jobs with kept evidence, lines, bytes before and after compression; None where the table is not there
    (an older schema) or this role may not read it."""
    if not conn.execute(text(
            "SELECT to_regclass('attribution.job_evidence') IS NOT NULL "
            "AND has_table_privilege('attribution.job_evidence', 'SELECT')")).scalar():
        return None
    r = conn.execute(text(
        "SELECT count(*), coalesce(sum(lines), 0), coalesce(sum(raw_bytes), 0), "
        "coalesce(sum(octet_length(document)), 0) FROM attribution.job_evidence")).one()
    return {"jobs": int(r[0]), "lines": int(r[1]), "raw_bytes": int(r[2]), "stored_bytes": int(r[3])}


def failed_jobs_with_evidence(conn: Connection, since=None, job_ref: int | None = None) -> Iterator[dict]:
    """Failed jobs (their current verdict's outcome is not `none`) with kept evidence, oldest first: the job row,
    its stored context, its current verdict and the evidence document."""
    rows = conn.execute(text(
        "SELECT j.id, j.cluster, j.job_id, j.start_time, j.end_time, j.context, j.nodes, j.gpus_per_node, "
        "v.id, v.outcome, v.root_kind, v.culprit_nodes, v.rules_version, ev.document "
        "FROM attribution.jobs j JOIN attribution.job_evidence ev ON ev.job_id = j.job_id AND ev.job_ref = j.id "
        "JOIN attribution.verdicts v ON v.job_id = j.job_id AND v.id = j.current_verdict_id "
        "WHERE v.outcome <> 'none' AND (CAST(:since AS timestamptz) IS NULL "
        "OR coalesce(j.end_time, j.start_time) >= CAST(:since AS timestamptz)) "
        "AND (CAST(:ref AS bigint) IS NULL OR j.id = CAST(:ref AS bigint)) "
        "ORDER BY coalesce(j.end_time, j.start_time), j.id"), {"since": since, "ref": job_ref})
    for r in rows:
        yield {"job_ref": r[0], "cluster": r[1], "job_id": r[2], "start": r[3], "end": r[4], "context": r[5],
               "nodes": list(r[6] or ()), "gpus_per_node": r[7], "verdict_id": r[8], "outcome": r[9],
               "root_kind": r[10], "culprits": sorted(r[11] or ()), "rules_version": r[12],
               "evidence": decode(r[13])}
