"""A job's verdicts in the store: a new one only when it differs from the current one, the roles of the
job's events in it, and the failed_roots rollups (failed jobs by infrastructure root cause, per week and over all
weeks: failed_root_series)."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta, timezone
from typing import Callable

from sqlalchemy import Connection, text

from attribution.model import INFRASTRUCTURE_OUTCOMES, ExecutionContext, Verdict
from attribution.store.jobs import JobRef
from attribution.store.links import job_event_rows

UTC = timezone.utc


class JobVerdicts:
    """Saving a job's verdict (part of writer.JobSession)."""

    conn: Connection
    ctx: ExecutionContext
    job: JobRef
    _key: Callable[..., dict]

    def save_verdict(self, verdict: Verdict, document: dict) -> tuple[int, bool]:
        """Add the verdict unless it is the same as the current one. Returns (current verdict id, changed)."""
        digest = verdict_digest(document)
        cur = self.conn.execute(text(
            "SELECT v.id, v.input_digest, v.outcome, v.root_node, v.root_gpu, v.root_kind, v.root_code, "
            "coalesce(v.root_time, j.end_time, j.start_time) FROM attribution.jobs j JOIN attribution.verdicts v "
            "ON v.job_id = j.job_id AND v.id = j.current_verdict_id WHERE j.job_id = :jid AND j.id = :id"),
            self._key()).first()
        if cur is not None and cur[1] == digest:
            return cur[0], False
        root = verdict.root_cause
        ids = self._event_ids()
        root_id = ids.get((root.rule, root.location, root.kind, root.line)) if root else None
        vid = self.conn.execute(text(
            "INSERT INTO attribution.verdicts (job_id, job_ref, outcome, confidence, action, root_event_id, "
            "root_kind, root_code, root_node, root_gpu, root_time, culprit_nodes, culprit_evidence, explanation, "
            "rules_version, input_digest, document) VALUES (:jid, :job, :o, :conf, :a, :rid, :rk, :rc, :rn, :rg, "
            ":rt, :cul, :cev, :ex, :rv, :dg, CAST(:doc AS jsonb)) RETURNING id"),
            {"jid": self.job.job_id, "job": self.job.id, "o": verdict.outcome, "conf": verdict.confidence,
             "a": verdict.action,
             "rid": root_id, "rk": root.kind if root else None, "rc": root.code if root else None,
             "rn": root.node if root else None, "rg": root.gpu if root else None,
             "rt": root.time if root else None, "cul": [n for n, _ in verdict.culprits],
             "cev": [verdict.evidence_of_culprit(i) for i in range(len(verdict.culprits))],
             "ex": verdict.explanation, "rv": verdict.rules_version, "dg": digest,
             "doc": json.dumps(document)}).scalar_one()
        self._save_roles(verdict, vid, ids)
        self.conn.execute(text("UPDATE attribution.jobs SET current_verdict_id = :v, current_outcome = :o, updated_at = now() "
                               "WHERE job_id = :jid AND id = :id"), self._key(v=vid, o=verdict.outcome))
        old_key = _root_key(self.ctx.cluster, *cur[2:]) if cur is not None else None
        new_key = None
        if root is not None:
            placed = root.time or self.ctx.end or self.job.start
            new_key = _root_key(self.ctx.cluster, verdict.outcome, root.node, root.gpu, root.kind, root.code, placed)
        if old_key != new_key:
            changes = sorted([(k, d) for k, d in ((old_key, -1), (new_key, 1)) if k is not None])
            for key, delta in changes:
                self.conn.execute(text(
                    "INSERT INTO attribution.failed_roots (cluster, node, gpu_key, kind, code_key, week, jobs) "
                    "VALUES (:c, :n, :g, :k, :code, :w, :d) ON CONFLICT (cluster, node, gpu_key, kind, code_key, week) "
                    "DO UPDATE SET jobs = attribution.failed_roots.jobs + excluded.jobs"),
                    {"c": key[0], "n": key[1], "g": key[2], "k": key[3], "code": key[4], "w": key[5], "d": delta})
                self.conn.execute(text(
                    "INSERT INTO attribution.failed_root_series (cluster, node, gpu_key, kind, code_key, jobs) "
                    "VALUES (:c, :n, :g, :k, :code, :d) ON CONFLICT (cluster, node, gpu_key, kind, code_key) "
                    "DO UPDATE SET jobs = attribution.failed_root_series.jobs + excluded.jobs"),
                    {"c": key[0], "n": key[1], "g": key[2], "k": key[3], "code": key[4], "d": delta})
        return vid, True

    def _event_ids(self) -> dict[tuple, int]:
        rows = job_event_rows(self.conn, self.job.job_id, self.job.id, "e.id, e.rule, e.location, e.kind, e.line")
        return {(r[1], r[2], r[3], r[4]): r[0] for r in rows}

    def _save_roles(self, verdict: Verdict, vid: int, ids: dict[tuple, int]) -> None:
        roles: dict[int, str] = {}
        for e in verdict.causes:
            i = ids.get((e.rule, e.location, e.kind, e.line))
            if i is not None:
                roles[i] = "cause"
        if verdict.root_cause is not None:
            i = ids.get((verdict.root_cause.rule, verdict.root_cause.location, verdict.root_cause.kind,
                         verdict.root_cause.line))
            if i is not None:
                roles[i] = "root_cause"
        sym_rows = []
        for s in verdict.symptoms:
            i = ids.get((s.event.rule, s.event.location, s.event.kind, s.event.line))
            if i is None:
                continue
            roles.setdefault(i, "symptom")
            sym_rows.append((self.job.job_id, vid, i, s.explained_by))
        if sym_rows:
            raw = self.conn.connection.driver_connection
            with raw.cursor().copy("COPY attribution.verdict_symptoms (job_id, verdict_id, event_id, explained_by) "
                                   "FROM STDIN") as cp:
                for r in sorted(set(sym_rows)):
                    cp.write_row(r)
        # one statement, and only the links whose role changed are rewritten (a link the verdict does not
        # mention is 'unattributed', the column default). The roles go as one JSON object looked up per link: one
        # scan of the job's links and no join, whose plan a fresh table's missing statistics could make a nested
        # loop (20,481 links x 20,481 roles took 160 s that way)
        self.conn.execute(text(
            "UPDATE attribution.job_events je "
            "SET role_in_job = coalesce(CAST(:roles AS jsonb) ->> CAST(je.event_id AS text), 'unattributed') "
            "WHERE je.job_id = :jid AND je.job_ref = :id "
            "AND je.role_in_job IS DISTINCT FROM "
            "coalesce(CAST(:roles AS jsonb) ->> CAST(je.event_id AS text), 'unattributed')"),
            self._key(roles=json.dumps({str(i): r for i, r in roles.items()})))


def _root_key(cluster: str, outcome, node, gpu, kind, code, when) -> tuple | None:
    """The failed_roots row a verdict counts in: failed jobs whose root cause is an infrastructure fault on a node."""
    if outcome not in INFRASTRUCTURE_OUTCOMES or not node or not kind or when is None:
        return None
    day = when.astimezone(UTC).date()
    return (cluster, node, gpu or "", kind, -1 if code is None else int(code), day - timedelta(days=day.weekday()))


def verdict_digest(document: dict) -> str:
    """What makes two verdicts the same: everything but the wording of symptoms' order-independent fields."""
    return hashlib.sha256(json.dumps(document, sort_keys=True, default=str).encode()).hexdigest()
