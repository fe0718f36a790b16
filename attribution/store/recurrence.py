"""Recurrence: a workload failing again on the same cause. A workload is one user's jobs on one cluster that share
a base job id (the job id and its Slurm requeues, the tasks of one job array: `1234_5` and `1234_7`) or a job name
(a resubmission under a new job id: sbatch's --job-name, context.yaml's job_name); a job without a name takes the
name of a job of its base id that has one. The cause is the root cause's outcome, kind and code.

Job names are user-written (anyone may name a job anything): they group only the jobs of one known user, never two
users' and never a job whose user is not known, and they never affect draining (the drain policy reads no name
and no recurrence). The same rule as the failure_recurrence view (sql/70_failure_recurrence.sql)."""

from __future__ import annotations

from sqlalchemy import Connection, text

ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")

#: The user's failed jobs (with a root cause) and this job, each with its base job id and the name its workload
#: goes by (None: by its base id), as the view computes them.
EARLIER = """
WITH w AS (
    SELECT j.id, j.job_id, j.start_time, v.outcome, v.root_kind, v.root_code,
           split_part(j.job_id, '_', 1) AS base_id,
           CASE WHEN j.user_name IS NOT NULL THEN
               coalesce(nullif(j.job_name, ''), max(nullif(j.job_name, ''))
                   OVER (PARTITION BY split_part(j.job_id, '_', 1)))
           END AS named
    FROM attribution.jobs j
    LEFT JOIN attribution.verdicts v ON v.job_id = j.job_id AND v.id = j.current_verdict_id
    WHERE j.cluster = :c AND j.user_name IS NOT DISTINCT FROM :u
      AND ((v.outcome <> 'none' AND v.root_kind IS NOT NULL) OR (j.job_id = :j AND j.id = :id))
)
SELECT e.job_id, me.named, me.base_id
FROM w me JOIN w e ON e.id <> me.id
WHERE me.job_id = :j AND me.id = :id AND e.start_time < me.start_time
  AND (e.named IS NOT NULL) = (me.named IS NOT NULL) AND coalesce(e.named, e.base_id) = coalesce(me.named, me.base_id)
  AND e.outcome = :o AND e.root_kind = :k AND coalesce(e.root_code, -1) = :code
ORDER BY e.start_time, e.id"""


def recurrence(conn: Connection, job_ref: int, ctx, verdict) -> dict | None:
    """The earlier failures of this job's workload on the same root cause; None when this is the first (or
    the job did not fail, or its verdict has no root cause). The job's cluster, user and name are its stored
    row's (the most authoritative context's; a node's report carries no job name)."""
    root = verdict.root_cause
    if verdict.outcome == "none" or root is None:
        return None
    row = conn.execute(text("SELECT cluster, user_name FROM attribution.jobs WHERE job_id = :j AND id = :id"),
                       {"j": ctx.job_id, "id": job_ref}).first()
    if row is None:
        return None
    rows = conn.execute(text(EARLIER), {
        "c": row[0], "u": row[1], "j": ctx.job_id, "id": job_ref, "o": verdict.outcome, "k": root.kind,
        "code": -1 if root.code is None else int(root.code)}).all()
    if not rows:
        return None
    n = len(rows) + 1
    nth = ORDINALS[n - 1] if n <= len(ORDINALS) else f"{n}th"
    named, base = rows[0][1], rows[0][2]
    return {"failure_number": n, "earlier_jobs": [r[0] for r in rows], "workload": named or base,
            "by": "job_name" if named else "job_id",
            "message": f"{nth} failure of this workload on the same cause ({root.kind})"}


def render_with_recurrence(conn: Connection, job_ref: int, ctx, render):
    """A verdict renderer (reports.render.verdict_to_dict) that adds `recurrence` to the document of a repeat;
    given the document `render` made already (JobRow.attribute_ahead), it only adds that."""
    def rendered(verdict, doc: dict | None = None) -> dict:
        doc = render(verdict) if doc is None else doc
        again = recurrence(conn, job_ref, ctx, verdict)
        if again is not None:  # only then: a first failure's document is the verdict as diagnosed offline
            doc["recurrence"] = again
        return doc
    return rendered
