"""Recurrence: a workload failing again on the same cause. A workload is a user's job id on a cluster, a Slurm
requeue keeping the id, or the tasks of one job array (`1234_5` and `1234_7` are one workload); the cause is the
root cause's outcome, kind and code. Slurm job names are not in the stored context, so a resubmission under a
new job id is not recognised yet. The same rule as the failure_recurrence view (sql/70_failure_recurrence.sql)."""

from __future__ import annotations

from sqlalchemy import Connection, text

ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")


def workload_of(job_id: str) -> str:
    return job_id.split("_", 1)[0]


def recurrence(conn: Connection, job_ref: int, ctx, verdict) -> dict | None:
    """The earlier failures of this job's workload on the same root cause; None when this is the first (or
    the job did not fail, or its verdict has no root cause)."""
    root = verdict.root_cause
    if verdict.outcome == "none" or root is None:
        return None
    rows = conn.execute(text(
        "SELECT j.job_id FROM attribution.jobs j JOIN attribution.verdicts v "
        "ON v.job_id = j.job_id AND v.id = j.current_verdict_id "
        "WHERE j.cluster = :c AND j.user_name IS NOT DISTINCT FROM :u AND split_part(j.job_id, '_', 1) = :w "
        "AND j.id <> :id AND j.start_time < (SELECT start_time FROM attribution.jobs WHERE job_id = :j AND id = :id) "
        "AND v.outcome = :o AND v.root_kind = :k AND coalesce(v.root_code, -1) = :code "
        "ORDER BY j.start_time, j.id"),
        {"c": ctx.cluster, "u": ctx.user, "w": workload_of(ctx.job_id), "j": ctx.job_id, "id": job_ref,
         "o": verdict.outcome,
         "k": root.kind, "code": -1 if root.code is None else int(root.code)}).all()
    if not rows:
        return None
    n = len(rows) + 1
    nth = ORDINALS[n - 1] if n <= len(ORDINALS) else f"{n}th"
    return {"failure_number": n, "earlier_jobs": [r[0] for r in rows],
            "message": f"{nth} failure of this workload on the same cause ({root.kind})"}


def render_with_recurrence(conn: Connection, job_ref: int, ctx, render):
    """A verdict renderer (reports.render.verdict_to_dict) that adds `recurrence` to the document of a repeat."""
    def rendered(verdict) -> dict:
        doc = render(verdict)
        again = recurrence(conn, job_ref, ctx, verdict)
        if again is not None:  # only then: a first failure's document is the verdict as diagnosed offline
            doc["recurrence"] = again
        return doc
    return rendered
