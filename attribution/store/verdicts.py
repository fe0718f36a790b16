"""A job's verdicts in the store: a new one only when its decision differs from the current one's (the current one's
detail refined in place otherwise), the roles of the
job's events in it (arrays on the verdict: its causes' and its symptoms' event ids), and the failed_roots rollups (failed jobs by infrastructure root cause, per week and over all
weeks: failed_root_series)."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta, timezone
from typing import Callable

from sqlalchemy import Connection, text

from attribution.model import INFRASTRUCTURE_OUTCOMES, ExecutionContext, Verdict
from attribution.store.jobs import JobRef

UTC = timezone.utc


class JobVerdicts:
    """Saving a job's verdict (part of writer.JobSession)."""

    conn: Connection
    ctx: ExecutionContext
    job: JobRef
    _key: Callable[..., dict]

    def save_verdict(self, verdict: Verdict, document: dict,
                     ids: dict[tuple, int] | None = None) -> tuple[int, bool]:
        """Add the verdict as a new row when its decision (outcome, confidence, action, root cause, culprits) or
        its rule pack differs from the current one's; when only its detail differs (more symptoms and coverage from a later
        piece), bring the current row's document and roles up to date instead (refine_current_verdict, 0023); the
        same document: nothing. `ids`: the job's event ids by (rule, location, kind, line), as
        JobEvents.stored_events gives them; read when not given. Returns (current verdict id, whether the
        decision changed)."""
        doc = json.dumps(document, sort_keys=True, default=str)  # jsonb keeps no key order: one text for both
        digest = hashlib.sha256(doc.encode()).hexdigest()  # verdict_digest(document)
        cur = self.conn.execute(text(
            "SELECT v.id, v.input_digest, v.outcome, v.root_node, v.root_gpu, v.root_kind, v.root_code, "
            "coalesce(v.root_time, j.end_time, j.start_time), v.confidence, v.action, v.root_time, v.culprit_nodes, "
            "v.culprit_evidence, v.rules_version FROM attribution.jobs j JOIN attribution.verdicts v "
            "ON v.job_id = j.job_id AND v.id = j.current_verdict_id WHERE j.job_id = :jid AND j.id = :id"),
            self._key()).first()
        if cur is not None and cur[1] == digest:
            return cur[0], False
        root = verdict.root_cause
        if ids is None:
            ids = self.stored_events()[1]
        causes, symptoms, explained = _roles(verdict, ids)
        root_id = ids.get((root.rule, root.location, root.kind, root.line)) if root else None
        culprits = [n for n, _ in verdict.culprits]
        evidence = [verdict.evidence_of_culprit(i) for i in range(len(verdict.culprits))]
        decision = (verdict.outcome, verdict.confidence, verdict.action, root.kind if root else None,
                    root.code if root else None, root.node if root else None, root.gpu if root else None,
                    root.time if root else None, culprits, evidence)
        # another rule pack's verdict is a new row even when it decides the same: the history says which pack
        # made each decision (docs/replay.md)
        if cur is not None and cur[13] == verdict.rules_version and (
                cur[2], cur[8], cur[9], cur[5], cur[6], cur[3], cur[4], cur[10], list(cur[11]),
                list(cur[12])) == decision:
            refined = self.conn.execute(text(
                "SELECT attribution.refine_current_verdict(:jid, :job, :v, CAST(:doc AS jsonb), :dg, :ex, :rv, "
                ":rid, :causes, :symptoms, :explained)"),
                {"jid": self.job.job_id, "job": self.job.id, "v": cur[0], "doc": doc, "dg": digest,
                 "ex": verdict.explanation, "rv": verdict.rules_version, "rid": root_id, "causes": causes,
                 "symptoms": symptoms, "explained": explained}).scalar()
            if refined:
                return cur[0], False
        vid = self.conn.execute(text(
            "INSERT INTO attribution.verdicts (job_id, job_ref, outcome, confidence, action, root_event_id, "
            "root_kind, root_code, root_node, root_gpu, root_time, culprit_nodes, culprit_evidence, explanation, "
            "rules_version, input_digest, document, cause_event_ids, symptom_event_ids, symptom_explained_by) "
            "VALUES (:jid, :job, :o, :conf, :a, :rid, :rk, :rc, :rn, :rg, "
            ":rt, :cul, :cev, :ex, :rv, :dg, CAST(:doc AS jsonb), :causes, :symptoms, :explained) RETURNING id"),
            {"jid": self.job.job_id, "job": self.job.id, "o": verdict.outcome, "conf": verdict.confidence,
             "a": verdict.action,
             "rid": root_id, "rk": root.kind if root else None, "rc": root.code if root else None,
             "rn": root.node if root else None, "rg": root.gpu if root else None,
             "rt": root.time if root else None, "cul": culprits, "cev": evidence,
             "ex": verdict.explanation, "rv": verdict.rules_version, "dg": digest, "doc": doc,
             "causes": causes, "symptoms": symptoms, "explained": explained}).scalar_one()
        self.conn.execute(text("UPDATE attribution.jobs SET current_verdict_id = :v, current_outcome = :o, updated_at = now() "
                               "WHERE job_id = :jid AND id = :id"), self._key(v=vid, o=verdict.outcome))
        old_key = _root_key(self.ctx.cluster, *cur[2:8]) if cur is not None else None
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


def _roles(verdict: Verdict, ids: dict[tuple, int]) -> tuple[list[int], list[int], list[str | None]]:
    """The roles of the job's stored events in the verdict, as ids: its causes (root first, as it lists them) and
    its symptoms with what explains each (an event listed twice is kept once, its first place)."""
    causes: list[int] = []
    for e in verdict.causes:
        i = ids.get((e.rule, e.location, e.kind, e.line))
        if i is not None and i not in causes:
            causes.append(i)
    symptoms: dict[int, str | None] = {}
    for s in verdict.symptoms:
        i = ids.get((s.event.rule, s.event.location, s.event.kind, s.event.line))
        if i is not None:
            symptoms.setdefault(i, s.explained_by)
    return causes, list(symptoms), list(symptoms.values())


def _root_key(cluster: str, outcome, node, gpu, kind, code, when) -> tuple | None:
    """The failed_roots row a verdict counts in: failed jobs whose root cause is an infrastructure fault on a node."""
    if outcome not in INFRASTRUCTURE_OUTCOMES or not node or not kind or when is None:
        return None
    day = when.astimezone(UTC).date()
    return (cluster, node, gpu or "", kind, -1 if code is None else int(code), day - timedelta(days=day.weekday()))


def verdict_digest(document: dict) -> str:
    """What makes two verdicts the same: everything but the wording of symptoms' order-independent fields."""
    return hashlib.sha256(json.dumps(document, sort_keys=True, default=str).encode()).hexdigest()
