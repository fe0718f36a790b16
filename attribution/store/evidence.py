"""The evidence kept for replay (attribution.replay.keep makes the documents): written in the transaction that
stores the job's events, read back by `rules diff`, `reattribute` and `rules suggest`. Deleted with its job (ON
DELETE CASCADE). Keyed by (job_id, job_ref) like every per-job table.

A bundle's (or a backfill's) whole document is one row of job_evidence; each reporter of a job the hooks report
(a node, the controller) writes its own piece to job_evidence_pieces, within what the job's other pieces left of
the per-job bounds, and the job's document is their union, made when it is read (replay.keep.merge_piece): a
report costs its own piece, however many nodes the job has."""

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


def save_piece(conn: Connection, job_id: str, job_ref: int, key: str, piece: dict) -> None:
    """Store (or replace) one reporter's piece (`key`: `node/g01`), bounded by what the job's other pieces and
    its whole document left of the per-job bounds (replay.keep.bound_piece). The caller holds the job's lock."""
    from attribution.replay.keep import bound_piece

    used = conn.execute(text(
        "SELECT coalesce(sum(lines), 0), coalesce(sum(line_bytes), 0), coalesce(sum(telemetry_bytes), 0) "
        "FROM attribution.job_evidence_pieces WHERE job_id = :id AND job_ref = :j AND piece <> :k"),
        {"id": job_id, "j": job_ref, "k": key}).one()
    whole = conn.execute(text("SELECT lines, raw_bytes FROM attribution.job_evidence "
                              "WHERE job_id = :id AND job_ref = :j"), {"id": job_id, "j": job_ref}).first()
    lines, size, tel = int(used[0]), int(used[1]), int(used[2])
    if whole is not None:  # its raw size bounds its lines' and snapshots' both
        lines, size = lines + whole[0], size + whole[1]
    doc, n, nbytes, tbytes = bound_piece(piece, lines, size, tel)
    blob, raw = encode(doc)
    conn.execute(text(
        "INSERT INTO attribution.job_evidence_pieces (job_id, job_ref, piece, lines, line_bytes, telemetry_bytes, "
        "raw_bytes, truncated, document) VALUES (:id, :j, :k, :n, :lb, :tb, :r, :t, :d) "
        "ON CONFLICT (job_id, job_ref, piece) DO UPDATE SET lines = excluded.lines, line_bytes = excluded.line_bytes, "
        "telemetry_bytes = excluded.telemetry_bytes, raw_bytes = excluded.raw_bytes, truncated = excluded.truncated, "
        "document = excluded.document, stored_at = now()"),
        {"id": job_id, "j": job_ref, "k": key, "n": n, "lb": nbytes, "tb": tbytes, "r": raw,
         "t": bool(doc.get("truncated")), "d": blob})


def load_evidence(conn: Connection, job_id: str, job_ref: int) -> dict | None:
    """The job's kept evidence: its whole document joined with its reporters' pieces, or None."""
    blob = conn.execute(text("SELECT document FROM attribution.job_evidence WHERE job_id = :id AND job_ref = :j"),
                        {"id": job_id, "j": job_ref}).scalar()
    doc = None if blob is None else decode(blob)
    pieces = conn.execute(text(
        "SELECT piece, document FROM attribution.job_evidence_pieces WHERE job_id = :id AND job_ref = :j "
        "ORDER BY stored_at, piece"), {"id": job_id, "j": job_ref}).all()
    if pieces:
        from attribution.replay.keep import merge_piece

        for key, piece in pieces:
            doc = merge_piece(doc, key, decode(piece))
    return doc


def evidence_size(conn: Connection) -> dict | None:
    """Jobs with kept evidence, lines, bytes before and after compression; None where the table is not there
    (an older schema) or this role may not read it."""
    if not conn.execute(text(
            "SELECT to_regclass('attribution.job_evidence') IS NOT NULL "
            "AND has_table_privilege('attribution.job_evidence', 'SELECT')")).scalar():
        return None
    r = conn.execute(text(
        "SELECT count(DISTINCT (job_id, job_ref)), coalesce(sum(lines), 0), coalesce(sum(raw_bytes), 0), "
        "coalesce(sum(octet_length(document)), 0) FROM (SELECT job_id, job_ref, lines, raw_bytes, document "
        "FROM attribution.job_evidence UNION ALL SELECT job_id, job_ref, lines, raw_bytes, document "
        "FROM attribution.job_evidence_pieces) e")).one()
    return {"jobs": int(r[0]), "lines": int(r[1]), "raw_bytes": int(r[2]), "stored_bytes": int(r[3])}


def failed_jobs_with_evidence(conn: Connection, since=None, job_ref: int | None = None) -> Iterator[dict]:
    """Failed jobs (their current verdict's outcome is not `none`) with kept evidence, oldest first: the job row,
    its stored context, its current verdict and the evidence document."""
    rows = conn.execute(text(
        "SELECT j.id, j.cluster, j.job_id, j.start_time, j.end_time, j.context, j.nodes, j.gpus_per_node, "
        "v.id, v.outcome, v.root_kind, v.culprit_nodes, v.rules_version "
        "FROM attribution.jobs j "
        "JOIN attribution.verdicts v ON v.job_id = j.job_id AND v.id = j.current_verdict_id "
        "WHERE v.outcome <> 'none' AND (EXISTS (SELECT 1 FROM attribution.job_evidence ev WHERE ev.job_id = j.job_id "
        "AND ev.job_ref = j.id) OR EXISTS (SELECT 1 FROM attribution.job_evidence_pieces ep "
        "WHERE ep.job_id = j.job_id AND ep.job_ref = j.id)) AND (CAST(:since AS timestamptz) IS NULL "
        "OR coalesce(j.end_time, j.start_time) >= CAST(:since AS timestamptz)) "
        "AND (CAST(:ref AS bigint) IS NULL OR j.id = CAST(:ref AS bigint)) "
        "ORDER BY coalesce(j.end_time, j.start_time), j.id"), {"since": since, "ref": job_ref})
    for r in rows.all():
        yield {"job_ref": r[0], "cluster": r[1], "job_id": r[2], "start": r[3], "end": r[4], "context": r[5],
               "nodes": list(r[6] or ()), "gpus_per_node": r[7], "verdict_id": r[8], "outcome": r[9],
               "root_kind": r[10], "culprits": sorted(r[11] or ()), "rules_version": r[12],
               "evidence": load_evidence(conn, r[2], r[0])}
