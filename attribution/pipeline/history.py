"""Replaying stored history with another rule pack: `rules diff` (what would change) and `reattribute` (make it so).

Each job's new verdict is derived from its kept evidence (attribution.pipeline.rederive) with its stored context
and coverage. Applying one stores the events the new pack finds, adds the verdict (the earlier ones stay: the
verdict history) with the pack's version in verdicts.rules_version, under the job's lock.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Engine

from attribution.replay.diff import Change, Side, side_of_verdict
from attribution.rulepack.load import RuleSet
from attribution.serialize import context_from_json
from attribution.store import in_transaction
from attribution.store.evidence import failed_jobs_with_evidence
from attribution.store.writer import JobRef, JobSession


def _stored(conn, row) -> tuple:
    ctx = context_from_json(row["context"])
    ref = JobRef(row["job_ref"], row["cluster"], row["job_id"], row["start"])
    s = JobSession(conn, ctx, "replay", job=ref)
    root_node = conn.exec_driver_sql("SELECT root_node FROM attribution.verdicts WHERE job_id = %s AND id = %s",
                                     (row["job_id"], row["verdict_id"])).scalar()
    before = Side(row["outcome"], row["root_kind"], root_node, tuple(row["culprits"]))
    return ctx, ref, s.events(), s.coverage(), before


def replay(engine: Engine, ruleset: RuleSet, since: datetime | None = None) -> tuple[list[Change], int]:
    """Every stored failed job with kept evidence whose verdict `ruleset` changes; and how many were examined."""
    from attribution.pipeline.rederive import rederive

    def work(conn):
        changes = []
        n = 0
        for row in list(failed_jobs_with_evidence(conn, since)):
            n += 1
            ctx, ref, events, coverage, before = _stored(conn, row)
            after = side_of_verdict(rederive(ruleset, ctx, row["evidence"], coverage, events).verdict)
            if after != before:
                changes.append(Change(row["cluster"], row["job_id"], row["job_ref"], before, after,
                                      row["rules_version"], ruleset.version))
        return changes, n

    return in_transaction(engine, work)


def reattribute(engine: Engine, ruleset: RuleSet, since: datetime | None = None) -> tuple[list[Change], int]:
    """Apply `ruleset` to the stored failed jobs with kept evidence: a new verdict for each one it changes."""
    from attribution.correlate.rootcause import in_window, job_window
    from attribution.pipeline.rederive import rederive
    from attribution.reports.render import verdict_to_dict
    from attribution.store.recurrence import render_with_recurrence

    changes, n = replay(engine, ruleset, since)
    lo_hi = {}
    for ch in changes:
        def apply(conn, ch=ch):
            row = next(failed_jobs_with_evidence(conn, job_ref=ch.job_ref), None)
            if row is None:
                return
            ctx = context_from_json(row["context"])
            s = JobSession(conn, ctx, "replay")  # takes the job's lock
            if s.job.id != ch.job_ref:
                return
            d = rederive(ruleset, s.stored_context(), row["evidence"], s.coverage(), s.events())
            lo, hi = lo_hi.setdefault(ch.job_ref, job_window(ctx, ruleset.graph))
            s.add_events([e for e in d.events if in_window(e, lo, hi)])
            s.save_verdict(d.verdict, render_with_recurrence(conn, s.job.id, ctx, verdict_to_dict)(d.verdict))

        in_transaction(engine, apply)
    return changes, n


def job_gpu_hours(ctx) -> float:
    """GPUs x run time: what the job held when it failed (GPUs per node, else tasks per node, else one)."""
    if ctx.start is None or ctx.end is None:
        return 0.0
    per = ctx.gpus_per_node or ctx.tasks_per_node or 1
    return max(0.0, (ctx.end - ctx.start).total_seconds()) / 3600 * per * len(ctx.nodes)


def unmatched_lines(engine: Engine, ruleset: RuleSet, since: datetime | None = None) -> list:
    """The kept error-looking lines of stored failed jobs that no rule of `ruleset` matches nor ignores, oldest job
    first."""
    import tempfile
    from pathlib import Path

    from attribution.collect.bundle import collect_bundle
    from attribution.extract.redact import redact_observation
    from attribution.replay.keep import pack_errorlike
    from attribution.pipeline.rederive import write_scratch_bundle
    from attribution.replay.streams import replay_streams
    from attribution.replay.suggest import unmatched

    errorlike = pack_errorlike(ruleset)
    rows = in_transaction(engine, lambda c: list(failed_jobs_with_evidence(c, since)))
    out = []
    for row in rows:
        ctx = context_from_json(row["context"])
        with tempfile.TemporaryDirectory(prefix="attribution-suggest-") as tmp:
            root = Path(tmp) / "bundle"
            write_scratch_bundle(root, ctx, row["evidence"])
            observations, _ = collect_bundle(root, ctx, lambda _source: errorlike)
        observations += replay_streams(row["evidence"], ctx, lambda _source: errorlike)  # the connectors' lines
        observations = [redact_observation(ruleset, o) for o in observations]  # kept before the pack's redactions
        out += unmatched(ruleset, observations, f"{row['cluster']}/{row['job_id']}", job_gpu_hours(ctx),
                         row["outcome"] == "unknown")
    return out
