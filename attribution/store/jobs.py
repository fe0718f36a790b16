"""A job's row in the store and who works on it: the per-job advisory lock, the row found or created (the
context whose source takes precedence wins), the evidence counter and the claim to attribute.

Every statement about one job names the job's `job_id` (the distribution column of the per-job tables,
docs/store.md "Past one server"), so that on Citus each is routed to the job's shard."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from sqlalchemy import Connection, text

from attribution.model import ExecutionContext, Verdict
from attribution.serialize import context_from_json, context_to_json

UTC = timezone.utc
#: Which source of a job's context takes precedence: the controller and bundles know the final state, a node
#: does not (stored in the jobs.context_precedence column).
CONTEXT_PRECEDENCE = {"node": 1, "epilog": 1, "sacct": 2, "kueue": 2, "controller": 3, "bundle": 3, "api": 3}
#: Two reports of one job id whose start times differ by less than this are the same job (ids wrap after months).
SAME_JOB_WINDOW = timedelta(days=1)


@dataclass(frozen=True)
class JobRef:
    id: int
    cluster: str
    job_id: str
    start: datetime


@dataclass(frozen=True)
class IngestResult:
    job: JobRef
    new_events: int
    linked_events: int
    verdict_id: int | None
    verdict_changed: bool


def _lock_key(cluster: str, job_id: str, what: str = "job") -> str:
    return f"attribution.{what}/{cluster}/{job_id}"


class JobRow:
    """The job's row, inside one transaction that holds the job's advisory lock (part of writer.JobSession)."""

    conn: Connection
    ctx: ExecutionContext
    job: JobRef

    def __init__(self, conn: Connection, ctx: ExecutionContext, source: str, job: JobRef | None = None) -> None:
        """Without `job`: take the job's advisory lock and find or create its row (to store evidence). With the
        `job` a previous transaction found: no lock (to attribute, after `claim_attribution`)."""
        self.conn = conn
        self.ctx = ctx
        self.source = source
        self.precedence = CONTEXT_PRECEDENCE.get(source, 1)
        self.created = False
        self._linked_batches = []
        if job is not None:
            self.job = job
            self.contended = False
            return
        key = {"k": _lock_key(ctx.cluster, ctx.job_id)}
        # another process storing this job right now: then attributing is left to whoever attributes next
        self.contended = not conn.execute(text("SELECT pg_try_advisory_xact_lock(hashtextextended(:k, 0))"),
                                          key).scalar_one()
        if self.contended:
            conn.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"), key)
        self.job = self._find_or_create()

    # -- who attributes ------------------------------------------------------------------------------------------
    def mark_pending(self) -> None:
        """Evidence was stored: count it, so the job's verdict is computed again (by this process or the one at
        it). The job's row is already locked by this transaction (`_find_or_create`)."""
        self.conn.execute(text("UPDATE attribution.jobs SET evidence_seq = evidence_seq + 1 "
                               "WHERE job_id = :jid AND id = :id"), self._key())

    def _key(self, **more) -> dict:
        """The job's row: its distribution key (job_id) and its id."""
        return dict(more, jid=self.job.job_id, id=self.job.id)

    def claim_attribution(self) -> bool:
        """True when this transaction is now the job's only attributor and evidence newer than the verdict is
        stored. Never waits, and locks no row: another process attributing the job will see the newer evidence
        count after it commits and go again, and storers go on storing meanwhile."""
        got = self.conn.execute(text("SELECT pg_try_advisory_xact_lock(hashtextextended(:k, 0))"),
                                {"k": _lock_key(self.ctx.cluster, self.ctx.job_id, "attribute")}).scalar_one()
        if not got:
            return False
        # read before the evidence (read committed: each later statement sees at least what this count counts)
        seq, done = self.conn.execute(text("SELECT evidence_seq, attributed_seq FROM attribution.jobs "
                                           "WHERE job_id = :jid AND id = :id"), self._key()).one()
        self._claimed_seq = seq
        return seq > done

    def attribute(self, ruleset, correlate, render, ahead: "Ahead | None" = None) -> tuple[int, bool, Verdict]:
        """Compute the job's verdict from everything stored for it and save it (after claim_attribution).
        `ahead` (attribute_ahead, before the events were stored): its verdict when the job turned out fresh
        (JobEvents.fresh: everything stored for it is what it computed from), else it is computed here."""
        events, ids = self.stored_events()
        if ahead is not None and self.fresh() is ahead.batch:
            verdict, doc = ahead.result()
            doc = render(verdict, doc)
        else:
            verdict = correlate(ruleset, self.stored_context(), events, self.coverage())
            doc = render(verdict)
        vid, changed = self.save_verdict(verdict, doc, ids)
        self.conn.execute(text("UPDATE attribution.jobs SET attributed_seq = greatest(attributed_seq, :s) "
                               "WHERE job_id = :jid AND id = :id"), self._key(s=self._claimed_seq))
        return vid, changed, verdict

    def attribute_ahead(self, ruleset, correlate, render, batch) -> "Ahead | None":
        """For a job this transaction created, about to store `batch` (JobEvents.batch) as its first evidence:
        start computing its verdict from the batch (`render`: the pure part of the document) in a worker thread,
        so that correlating runs while the server stores the events. The job's stored context and coverage are
        read first (set_coverage before this)."""
        if not self.created or self._linked_batches or not batch.rows:
            return None
        ctx, coverage = self.stored_context(), self.coverage()
        events = batch.events()

        def compute():
            verdict = correlate(ruleset, ctx, events, coverage)
            return verdict, render(verdict)
        return Ahead(batch, compute)

    def pending(self) -> bool:
        return bool(self.conn.execute(text("SELECT evidence_seq > attributed_seq FROM attribution.jobs "
                                           "WHERE job_id = :jid AND id = :id"), self._key()).scalar())

    def current_verdict_id(self) -> int | None:
        return self.conn.execute(text("SELECT current_verdict_id FROM attribution.jobs "
                                      "WHERE job_id = :jid AND id = :id"), self._key()).scalar()

    # -- the job row ---------------------------------------------------------------------------------------
    def _find_or_create(self) -> JobRef:
        ctx = self.ctx
        start = ctx.start or ctx.end or datetime.now(UTC)
        row = self.conn.execute(text(
            "SELECT id, start_time, context_precedence FROM attribution.jobs "
            "WHERE cluster = :c AND job_id = :j AND start_time BETWEEN :lo AND :hi "
            "ORDER BY abs(extract(epoch FROM start_time - :s)), id LIMIT 1 FOR UPDATE"),
            {"c": ctx.cluster, "j": ctx.job_id, "s": start, "lo": start - SAME_JOB_WINDOW,
             "hi": start + SAME_JOB_WINDOW}).first()
        doc = json.dumps(context_to_json(ctx))
        values = {"c": ctx.cluster, "j": ctx.job_id, "s": start, "e": ctx.end, "u": ctx.user, "p": ctx.partition,
                  "st": ctx.state, "x": ctx.exit_code, "f": ctx.failed_node, "n": list(ctx.nodes),
                  "g": ctx.gpus_per_node, "doc": doc, "src": self.source, "prec": self.precedence,
                  "jn": ctx.job_name}
        if row is None:
            new_id = self.conn.execute(text(
                "INSERT INTO attribution.jobs (cluster, job_id, start_time, end_time, user_name, job_name, partition, "
                "state, exit_code, failed_node, nodes, gpus_per_node, context, context_source, context_precedence) "
                "VALUES (:c, :j, :s, :e, :u, :jn, :p, :st, :x, :f, :n, :g, CAST(:doc AS jsonb), :src, :prec) "
                "RETURNING id"), values).scalar_one()
            self.created = True
            return JobRef(new_id, ctx.cluster, ctx.job_id, start)
        ref, stored_start, stored_precedence = row
        if self.precedence >= stored_precedence:  # a context without a job name (a node's) keeps the known one
            self.conn.execute(text(
                "UPDATE attribution.jobs SET start_time = :s, end_time = :e, user_name = :u, "
                "job_name = coalesce(:jn, job_name), partition = :p, "
                "state = :st, exit_code = :x, failed_node = :f, nodes = :n, gpus_per_node = :g, "
                "context = CAST(:doc AS jsonb), context_source = :src, context_precedence = :prec, updated_at = now() "
                "WHERE job_id = :j AND id = :id"), dict(values, id=ref))
            return JobRef(ref, ctx.cluster, ctx.job_id, start)
        return JobRef(ref, ctx.cluster, ctx.job_id, stored_start)

    def stored_context(self) -> ExecutionContext:
        doc = self.conn.execute(text("SELECT context FROM attribution.jobs WHERE job_id = :jid AND id = :id"),
                                self._key()).scalar_one()
        return context_from_json(doc)


class Ahead:
    """A verdict being computed in a worker thread (JobRow.attribute_ahead): pure work over frozen values, no
    connection; `result()` waits for it and raises what it raised."""

    def __init__(self, batch, compute) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.batch = batch
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="attribution-verdict")
        self._future = pool.submit(compute)
        pool.shutdown(wait=False)  # the thread ends with its one task

    def result(self):
        return self._future.result()


def pending_jobs(conn: Connection) -> list[tuple[JobRef, ExecutionContext]]:
    """Jobs whose stored evidence is newer than their verdict, oldest first, with their stored contexts."""
    rows = conn.execute(text(
        "SELECT id, cluster, job_id, start_time, context FROM attribution.jobs WHERE evidence_seq > attributed_seq "
        "ORDER BY id")).all()
    return [(JobRef(r[0], r[1], r[2], r[3]), context_from_json(r[4])) for r in rows]
