"""Redacting what is already stored with a newer redaction pack (`attribution db redact`, docs/security.md "Secrets
in job output"): events' line, message and text fields, the lines kept for replay (job_evidence), the verdict
documents' events.

The store knows nothing of the patterns: the caller passes what redacts a text, a kept-evidence document and a
verdict document (attribution.extract.redact, with the pack's redactions), each returning the count per kind. Each
table is read in batches in key order, one transaction per batch (bounded memory, short row locks); a row whose
text holds nothing to redact is not written, so a second run changes nothing. Every update names the row's full
key, the distribution column first (events by node_key, the per-job tables by job_id): on Citus each is routed to
its shard and no distribution column is ever changed.

An event's fingerprint (its identity: codec.fingerprint, over the normalized message) is recomputed from the
redacted message, so that the same line ingested again after the new pack (a spool replay, a job's second piece,
another job on the node) is still the same event. It is only recomputed when the stored fingerprint can be
reproduced from the row (for a job-scoped line with its job, from the event's links); when it cannot (a row stored
by an older fingerprint rule, a job line whose links are gone), or when another row already has the new one (the
same line was stored again after the new pack came: the two rows stay), the fingerprint is kept and counted. A
verdict's input digest (the digest of its document) is recomputed likewise, so the job's next identical verdict is
recognized as unchanged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

from sqlalchemy import Engine, text

from attribution.store import in_transaction
from attribution.store.codec import fingerprint_of
from attribution.store.evidence import decode, encode
from attribution.store.links import JOB_SCOPED_SOURCES
from attribution.store.verdicts import verdict_digest

#: What redacts a text, a kept-evidence document, a verdict document: the redacted value and the count per kind.
Redactor = Callable[[Any], tuple[Any, dict[str, int]]]


@dataclass
class TableRedaction:
    """What one table gave: rows read, rows changed, spans redacted per kind."""

    rows: int = 0
    changed: int = 0
    kinds: dict[str, int] = field(default_factory=dict)

    def add(self, counts: dict[str, int]) -> None:
        for kind, n in counts.items():
            self.kinds[kind] = self.kinds.get(kind, 0) + n

    def as_dict(self) -> dict:
        return {"rows": self.rows, "changed": self.changed, "kinds": dict(sorted(self.kinds.items()))}


@dataclass
class Redaction:
    """What `redact_stored` did (or, dry, would do)."""

    dry_run: bool
    events: TableRedaction = field(default_factory=TableRedaction)
    evidence: TableRedaction = field(default_factory=TableRedaction)
    verdicts: TableRedaction = field(default_factory=TableRedaction)
    fingerprints_updated: int = 0
    fingerprints_kept: int = 0
    digests_kept: int = 0

    def kinds(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for t in (self.events, self.evidence, self.verdicts):
            for kind, n in t.kinds.items():
                total[kind] = total.get(kind, 0) + n
        return dict(sorted(total.items()))

    def as_dict(self) -> dict:
        return {"dry_run": self.dry_run, "events": self.events.as_dict(), "job_evidence": self.evidence.as_dict(),
                "verdicts": self.verdicts.as_dict(), "fingerprints_updated": self.fingerprints_updated,
                "fingerprints_kept": self.fingerprints_kept, "verdict_digests_kept": self.digests_kept,
                "kinds": self.kinds()}


def redact_stored(engine: Engine, redact_text: Redactor, redact_kept: Redactor, redact_document: Redactor,
                  batch: int = 1000, dry_run: bool = False) -> Redaction:
    """Redact every stored event, kept evidence document and verdict document (see the module docstring)."""
    out = Redaction(dry_run)
    _each_batch(engine, batch, _EVENTS, lambda c, rows: _events(c, rows, redact_text, out, dry_run))
    _each_batch(engine, batch, _EVIDENCE, lambda c, rows: _evidence(c, rows, redact_kept, out, dry_run))
    _each_batch(engine, batch, _PIECES, lambda c, rows: _pieces(c, rows, redact_kept, out, dry_run))
    _each_batch(engine, batch, _VERDICTS, lambda c, rows: _verdicts(c, rows, redact_document, out, dry_run))
    return out


#: Each table's batch, after the last key read: (SQL, how many key columns lead the row).
_EVENTS = ("SELECT node_key, id, occurred_at, fingerprint, cluster, node, source, kind, time_exact, location, "
           "message, line, fields FROM attribution.events WHERE (node_key, id) > (:k0, :k1) "
           "ORDER BY node_key, id LIMIT :n", 2)
_EVIDENCE = ("SELECT job_id, job_ref, document FROM attribution.job_evidence WHERE (job_id, job_ref) > (:k0, :k1) "
             "ORDER BY job_id, job_ref LIMIT :n", 2)
_PIECES = ("SELECT job_id, job_ref, piece, document FROM attribution.job_evidence_pieces "
           "WHERE (job_id, job_ref, piece) > (:k0, :k1, :k2) ORDER BY job_id, job_ref, piece LIMIT :n", 3)
_VERDICTS = ("SELECT job_id, id, input_digest, document FROM attribution.verdicts WHERE (job_id, id) > (:k0, :k1) "
             "ORDER BY job_id, id LIMIT :n", 2)
#: Before every key (text, then a number, then text).
_FIRST = ("", -(2**63), "")


def _each_batch(engine: Engine, size: int, query: tuple[str, int], work: Callable) -> None:
    sql, nkey = query
    last = _FIRST
    while True:
        def one(conn, after=last):
            rows = conn.execute(text(sql), {f"k{i}": after[i] for i in range(nkey)} | {"n": size}).all()
            if rows:
                work(conn, rows)
            return rows[-1][:nkey] if len(rows) == size else None
        last = in_transaction(engine, one)
        if last is None:
            return


def _events(conn, rows, redact_text: Redactor, out: Redaction, dry_run: bool) -> None:
    out.events.rows += len(rows)
    changed = []
    for r in rows:
        message, c1 = redact_text(r.message)
        line, c2 = redact_text(r.line)
        fields, c3 = _fields(r.fields, redact_text)
        if not (c1 or c2 or c3):
            continue
        for counts in (c1, c2, c3):
            out.events.add(counts)
        changed.append((r, message, line, fields))
    if not changed:
        return
    out.events.changed += len(changed)
    jobs = _linked_jobs(conn, [(r.node_key, r.id) for r, *_ in changed])
    taken: set[tuple] = set()
    params = []
    for r, message, line, fields in changed:
        fp = _new_fingerprint(conn, r, message, jobs.get((r.node_key, r.id), ()), taken)
        if fp is None:
            out.fingerprints_kept += 1
            fp = bytes(r.fingerprint)
        else:
            out.fingerprints_updated += 1
        taken.add((r.node_key, fp, r.occurred_at))
        params.append({"k": r.node_key, "i": r.id, "t": r.occurred_at, "m": message, "l": line,
                       "f": json.dumps(fields, sort_keys=True), "fp": fp})
    if not dry_run:
        conn.execute(text(
            "UPDATE attribution.events SET message = :m, line = :l, fields = CAST(:f AS jsonb), fingerprint = :fp "
            "WHERE node_key = :k AND id = :i AND occurred_at = :t"), params)


def _fields(fields: Any, redact_text: Redactor) -> tuple[dict, dict[str, int]]:
    total: dict[str, int] = {}
    out = {}
    for k, v in (fields or {}).items():
        if isinstance(v, str):
            v, counts = redact_text(v)
            for kind, n in counts.items():
                total[kind] = total.get(kind, 0) + n
        out[k] = v
    return out, total


def _linked_jobs(conn, keys: list[tuple[str, int]]) -> dict[tuple[str, int], list[str]]:
    """The job ids each event is linked to (event_jobs, stored with the event)."""
    rows = conn.execute(text(
        "SELECT ej.node_key, ej.event_id, ej.job_id FROM attribution.event_jobs ej "
        "JOIN unnest(CAST(:keys AS text[]), CAST(:ids AS bigint[])) AS l(node_key, event_id) "
        "  ON ej.node_key = l.node_key AND ej.event_id = l.event_id "
        "WHERE ej.node_key = ANY(CAST(:ukeys AS text[]))"),
        {"keys": [k for k, _ in keys], "ids": [i for _, i in keys], "ukeys": sorted({k for k, _ in keys})}).all()
    out: dict[tuple[str, int], list[str]] = {}
    for node_key, event_id, job_id in rows:
        out.setdefault((node_key, event_id), []).append(job_id)
    return out


def _scopes(r, job_ids) -> list[str]:
    """The scopes the row's fingerprint may have been computed with (store.events.JobEvents.batch)."""
    if r.source not in JOB_SCOPED_SOURCES:
        return [""]
    ids = list(dict.fromkeys(job_ids))
    if r.node_key.startswith(r.cluster + "/"):  # a job's line without a node: keyed by its job
        ids.append(r.node_key[len(r.cluster) + 1:])
    return [f"{r.cluster}/{j}" for j in dict.fromkeys(ids)]


def _new_fingerprint(conn, r, message: str, job_ids, taken: set) -> bytes | None:
    """The row's fingerprint over the redacted message, or None to keep the stored one (not reproducible, or
    another row has the new one already)."""
    when = r.occurred_at if r.time_exact else None
    stored = bytes(r.fingerprint)
    for scope in _scopes(r, job_ids):
        if fingerprint_of(r.cluster, r.node, r.source, when, r.kind, r.message, scope, r.location) != stored:
            continue
        fp = fingerprint_of(r.cluster, r.node, r.source, when, r.kind, message, scope, r.location)
        if fp == stored:
            return fp
        if (r.node_key, fp, r.occurred_at) in taken or conn.execute(text(
                "SELECT EXISTS (SELECT 1 FROM attribution.events WHERE node_key = :k AND fingerprint = :fp "
                "AND occurred_at = :t)"), {"k": r.node_key, "fp": fp, "t": r.occurred_at}).scalar():
            return None
        return fp
    return None


def _evidence(conn, rows, redact_kept: Redactor, out: Redaction, dry_run: bool) -> None:
    out.evidence.rows += len(rows)
    params = []
    for job_id, job_ref, blob in rows:
        doc, counts = redact_kept(decode(blob))
        if not counts:
            continue
        out.evidence.add(counts)
        data, raw = encode(doc)
        params.append({"j": job_id, "r": job_ref, "d": data, "n": raw})
    out.evidence.changed += len(params)
    if params and not dry_run:
        conn.execute(text("UPDATE attribution.job_evidence SET document = :d, raw_bytes = :n "
                          "WHERE job_id = :j AND job_ref = :r"), params)


def _pieces(conn, rows, redact_kept: Redactor, out: Redaction, dry_run: bool) -> None:
    """The reporters' pieces of kept lines (job_evidence_pieces): counted with job_evidence's."""
    out.evidence.rows += len(rows)
    params = []
    for job_id, job_ref, piece, blob in rows:
        doc, counts = redact_kept(decode(blob))
        if not counts:
            continue
        out.evidence.add(counts)
        data, raw = encode(doc)
        params.append({"j": job_id, "r": job_ref, "p": piece, "d": data, "n": raw})
    out.evidence.changed += len(params)
    if params and not dry_run:
        conn.execute(text("UPDATE attribution.job_evidence_pieces SET document = :d, raw_bytes = :n "
                          "WHERE job_id = :j AND job_ref = :r AND piece = :p"), params)


def _verdicts(conn, rows, redact_document: Redactor, out: Redaction, dry_run: bool) -> None:
    out.verdicts.rows += len(rows)
    params = []
    for job_id, vid, digest, document in rows:
        doc, counts = redact_document(document)
        if not counts:
            continue
        out.verdicts.add(counts)
        if digest == verdict_digest(document):
            digest = verdict_digest(doc)
        else:
            out.digests_kept += 1
        params.append({"j": job_id, "i": vid, "d": json.dumps(doc, sort_keys=True, default=str), "g": digest})
    out.verdicts.changed += len(params)
    if params and not dry_run:
        conn.execute(text("UPDATE attribution.verdicts SET document = CAST(:d AS jsonb), input_digest = :g "
                          "WHERE job_id = :j AND id = :i"), params)
