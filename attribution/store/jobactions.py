"""The store's side of acting on jobs (docs/job-actions.md): the audit (`attribution.job_actions`), what it counts
for the requeue caps, the failed jobs a requeue plan looks at, the comment last written for a run.

A requeue's audit row is written before its scontrol calls, under a per-cluster transaction lock that also
counts the caps, and a unique index takes one applied requeue per cause of a job: two processes deciding at once
(the service and the epilog, two service workers) requeue a job once and never past a cap.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Callable

from sqlalchemy import Connection, Engine, text

from attribution.act.requeue import Counts, RequeueDecision

UTC = timezone.utc
#: requeues of one job id count against its cap for this long (a Slurm job id comes back only after MaxJobId)
JOB_MEMORY = timedelta(days=30)

_REQUEUED = "action = 'requeue' AND decision = 'applied'"
COUNTS = f"""
SELECT (SELECT count(*) FROM attribution.job_actions
        WHERE job_id = :j AND cluster = :c AND {_REQUEUED} AND at >= :since_job) AS job,
       (SELECT count(*) FROM attribution.job_actions
        WHERE cluster = :c AND user_name = :u AND {_REQUEUED} AND at >= :hour) AS user_hour,
       (SELECT count(*) FROM attribution.job_actions WHERE cluster = :c AND {_REQUEUED} AND at >= :hour) AS hour,
       (SELECT min(at) FROM attribution.job_actions
        WHERE job_id = :j AND cluster = :c AND {_REQUEUED} AND cause = :cause) AS same_cause_at"""
INSERT = """
INSERT INTO attribution.job_actions (job_id, cluster, job_start, action, decision, user_name, cause, nodes, detail,
                                     policy_version, actor)
VALUES (:j, :c, :s, :action, :decision, :u, :cause, :nodes, :detail, :pv, :actor) RETURNING id"""


def counts(conn: Connection, cluster: str, job_id: str, user: str | None, cause: str | None,
           now: datetime) -> Counts:
    row = conn.execute(text(COUNTS), {"j": job_id, "c": cluster, "u": user, "cause": cause,
                                      "since_job": now - JOB_MEMORY, "hour": now - timedelta(hours=1)}).one()
    return Counts(int(row.job), int(row.user_hour), int(row.hour), row.same_cause_at)


def record(conn: Connection, cluster: str, job_id: str, start: datetime | None, action: str, decision: str,
           detail: str | None, user: str | None = None, cause: str | None = None, nodes=None,
           policy_version: str | None = None, actor: str | None = None) -> int:
    return int(conn.execute(text(INSERT), {
        "j": job_id, "c": cluster, "s": start, "action": action, "decision": decision, "u": user, "cause": cause,
        "nodes": list(nodes) if nodes else None, "detail": detail, "pv": policy_version,
        "actor": actor}).scalar_one())


def decide_and_record(engine: Engine, cluster: str, job_id: str, start: datetime | None, user: str | None,
                      cause: str | None, decide: Callable[[Counts], RequeueDecision], policy_version: str,
                      actor: str | None, now: datetime, dry_run: bool = False) -> tuple[RequeueDecision, int | None]:
    """The requeue decision on the audit's counts, taken under the cluster's lock; a requeue's row is written
    (`applied`, before any scontrol call: `outcome` says later if the call failed) and its id returned. A skip or
    a cap is recorded once per cause and detail (the service decides on every attribution of a job). `dry_run`:
    decided, nothing written."""
    with engine.begin() as c:
        c.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"),
                  {"k": f"attribution.requeue/{cluster}"})
        d = decide(counts(c, cluster, job_id, user, cause, now))
        if dry_run or not d.candidate:
            return d, None
        if d.decision == "requeue":
            return d, record(c, cluster, job_id, start, "requeue", "applied", d.detail, user, d.cause, d.exclude,
                             policy_version, actor)
        last = c.execute(text(
            "SELECT decision, detail FROM attribution.job_actions WHERE job_id = :j AND cluster = :c "
            "AND action = 'requeue' AND cause IS NOT DISTINCT FROM :cause ORDER BY id DESC LIMIT 1"),
            {"j": job_id, "c": cluster, "cause": d.cause}).first()
        if last is None or tuple(last) != (d.decision, d.detail):
            record(c, cluster, job_id, start, "requeue", d.decision, d.detail, user, d.cause, d.exclude,
                   policy_version, actor)
        return d, None


def outcome(engine: Engine, job_id: str, action_id: int, decision: str, detail: str) -> None:
    """The Slurm call of an audited action failed: its row says so (and stops counting against the caps)."""
    with engine.begin() as c:
        c.execute(text("UPDATE attribution.job_actions SET decision = :d, detail = :det "
                       "WHERE job_id = :j AND id = :id"), {"d": decision, "det": detail, "j": job_id, "id": action_id})


def last_comment(conn: Connection, cluster: str, job_id: str, start: datetime | None) -> str | None:
    """The AdminComment last written for this run of the job (None: none yet)."""
    return conn.execute(text(
        "SELECT detail FROM attribution.job_actions WHERE job_id = :j AND cluster = :c AND action = 'admin_comment' "
        "AND decision = 'applied' AND job_start IS NOT DISTINCT FROM :s ORDER BY id DESC LIMIT 1"),
        {"j": job_id, "c": cluster, "s": start}).scalar()


def job_actions(conn: Connection, cluster: str, job_id: str) -> list[dict]:
    """Every action recorded for the job id (all its runs), oldest first: the job page's audit."""
    rows = conn.execute(text(
        "SELECT at, job_start, action, decision, cause, nodes, detail, actor FROM attribution.job_actions "
        "WHERE job_id = :j AND cluster = :c ORDER BY id"), {"j": job_id, "c": cluster}).mappings().all()
    return [dict(r) for r in rows]


def actions(engine: Engine, cluster: str | None = None, limit: int = 50) -> list[dict]:
    """The audit, newest first (`attribution requeue log`)."""
    with engine.connect() as c:
        rows = c.execute(text(
            "SELECT at, cluster, job_id, job_start, action, decision, user_name, cause, nodes, detail, actor "
            "FROM attribution.job_actions WHERE CAST(:c AS text) IS NULL OR cluster = :c "
            "ORDER BY at DESC, id DESC LIMIT :n"), {"c": cluster, "n": limit}).mappings().all()
    return [dict(r) for r in rows]


#: the current verdicts of jobs that ended since :since (the requeue plan: store.jobactions.recent_failures)
RECENT = """
SELECT j.cluster, j.job_id, j.start_time, v.document
FROM attribution.jobs j JOIN attribution.verdicts v ON v.job_id = j.job_id AND v.id = j.current_verdict_id
WHERE j.end_time >= :since AND (CAST(:c AS text) IS NULL OR j.cluster = :c)
  AND v.outcome = ANY(:outcomes) AND cardinality(v.culprit_nodes) > 0
ORDER BY j.end_time, j.job_id"""


def recent_failures(engine: Engine, since: datetime, outcomes, cluster: str | None = None) -> list[tuple]:
    """(cluster, job id, start, verdict document) of the jobs that ended since `since` with a verdict of one of
    `outcomes` that names culprits, oldest end first; only each job id's newest stored job."""
    with engine.connect() as c:
        rows = c.execute(text(RECENT), {"since": since, "c": cluster, "outcomes": list(outcomes)}).all()
    newest: dict[tuple, tuple] = {}
    for r in rows:
        key = (r[0], r[1])
        if key not in newest or r[2] > newest[key][2]:
            newest[key] = tuple(r)
    return sorted(newest.values(), key=lambda r: ((r[3].get("job") or {}).get("end") or "", r[1]))


__all__ = ["counts", "record", "decide_and_record", "outcome", "last_comment", "job_actions", "actions",
           "recent_failures", "JOB_MEMORY"]
