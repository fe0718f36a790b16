"""Writing a job's evidence and verdicts: idempotent, batched, safe to run from many processes at once.

All work on one job happens in a `JobSession`: one transaction holding a per-job advisory lock, so concurrent
ingests of the same job (64 node epilogs at once) queue up instead of racing, and every ingest re-attributes
the job from everything stored so far. Events go in through COPY into a temporary table and one
`INSERT ... ON CONFLICT DO NOTHING`, in fingerprint order (a fixed lock order: no deadlocks between jobs that
share kernel lines).

Every statement about one job names the job's `job_id` (the distribution column of the per-job tables) and every
statement about events their `node_key` (links.py), so that on Citus each is routed to the shards it needs.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Iterable, Mapping, Sequence

from sqlalchemy import Connection, text

from attribution.model import INFRASTRUCTURE_OUTCOMES, Coverage, Event, ExecutionContext, Verdict
from attribution.serialize import context_from_json, context_to_json
from attribution.store.codec import event_from_row, fingerprint
from attribution.store.links import JOB_SCOPED_SOURCES, job_event_rows, node_key

UTC = timezone.utc
#: Which source of a job's context wins: the controller and bundles know the final state, a node does not.
CONTEXT_RANK = {"node": 1, "epilog": 1, "sacct": 2, "kueue": 2, "controller": 3, "bundle": 3, "api": 3}
#: Two reports of one job id whose start times differ by less than this are the same job (ids wrap after months).
SAME_JOB_WINDOW = timedelta(days=1)

INFRA_SQL = "('gpu_hardware', 'nvlink', 'nvswitch_fabric', 'network', 'host')"
EVENT_COLUMNS = ("occurred_at", "fingerprint", "cluster", "node", "node_key", "source", "kind", "role", "code", "gpu",
                 "rank",
                 "time_exact", "outcome", "action", "severity", "rule", "location", "message", "line", "fields")


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


def _int4(v: int | None) -> int | None:
    """Events from a spool file or the API are not trusted to fit the integer columns: out of range is unknown."""
    return v if v is None or -2**31 < v < 2**31 else None


class JobSession:
    """Everything stored about one job, inside one transaction that holds the job's advisory lock."""

    def __init__(self, conn: Connection, ctx: ExecutionContext, source: str, job: JobRef | None = None) -> None:
        """Without `job`: take the job's advisory lock and find or create its row (to store evidence). With the
        `job` a previous transaction found: no lock (to attribute, after `claim_attribution`)."""
        self.conn = conn
        self.ctx = ctx
        self.source = source
        self.rank = CONTEXT_RANK.get(source, 1)
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

    def attribute(self, ruleset, correlate, render) -> tuple[int, bool, Verdict]:
        """Compute the job's verdict from everything stored for it and save it (after claim_attribution)."""
        verdict = correlate(ruleset, self.stored_context(), self.events(), self.coverage())
        vid, changed = self.save_verdict(verdict, render(verdict))
        self.conn.execute(text("UPDATE attribution.jobs SET attributed_seq = greatest(attributed_seq, :s) "
                               "WHERE job_id = :jid AND id = :id"), self._key(s=self._claimed_seq))
        return vid, changed, verdict

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
            "SELECT id, start_time, context_rank FROM attribution.jobs "
            "WHERE cluster = :c AND job_id = :j AND start_time BETWEEN :lo AND :hi "
            "ORDER BY abs(extract(epoch FROM start_time - :s)), id LIMIT 1 FOR UPDATE"),
            {"c": ctx.cluster, "j": ctx.job_id, "s": start, "lo": start - SAME_JOB_WINDOW,
             "hi": start + SAME_JOB_WINDOW}).first()
        doc = json.dumps(context_to_json(ctx))
        values = {"c": ctx.cluster, "j": ctx.job_id, "s": start, "e": ctx.end, "u": ctx.user, "p": ctx.partition,
                  "st": ctx.state, "x": ctx.exit_code, "f": ctx.failed_node, "n": list(ctx.nodes),
                  "g": ctx.gpus_per_node, "doc": doc, "src": self.source, "rank": self.rank}
        if row is None:
            new_id = self.conn.execute(text(
                "INSERT INTO attribution.jobs (cluster, job_id, start_time, end_time, user_name, partition, state, "
                "exit_code, failed_node, nodes, gpus_per_node, context, context_source, context_rank) "
                "VALUES (:c, :j, :s, :e, :u, :p, :st, :x, :f, :n, :g, CAST(:doc AS jsonb), :src, :rank) "
                "RETURNING id"), values).scalar_one()
            return JobRef(new_id, ctx.cluster, ctx.job_id, start)
        ref, stored_start, stored_rank = row
        if self.rank >= stored_rank:
            self.conn.execute(text(
                "UPDATE attribution.jobs SET start_time = :s, end_time = :e, user_name = :u, partition = :p, "
                "state = :st, exit_code = :x, failed_node = :f, nodes = :n, gpus_per_node = :g, "
                "context = CAST(:doc AS jsonb), context_source = :src, context_rank = :rank, updated_at = now() "
                "WHERE job_id = :j AND id = :id"), dict(values, id=ref))
            return JobRef(ref, ctx.cluster, ctx.job_id, start)
        return JobRef(ref, ctx.cluster, ctx.job_id, stored_start)

    def stored_context(self) -> ExecutionContext:
        doc = self.conn.execute(text("SELECT context FROM attribution.jobs WHERE job_id = :jid AND id = :id"),
                                self._key()).scalar_one()
        return context_from_json(doc)

    # -- events ----------------------------------------------------------------------------------------------
    def add_events(self, events: Sequence[Event], link: bool = True) -> tuple[int, int]:
        """Store events (once each, whatever other jobs saw them) and, with `link`, link them to this job.
        Events outside the job's window are stored for fleet trends without a link.
        Returns (events new to the store, links new to this job)."""
        if not events:
            return 0, 0
        placement = self.ctx.end or datetime.now(UTC)
        rows = {}
        for ev in events:
            scope = f"{self.ctx.cluster}/{self.ctx.job_id}" if ev.source in JOB_SCOPED_SOURCES else ""
            fp = fingerprint(self.ctx.cluster, ev, scope)
            occurred = ev.time or placement
            key = node_key(self.ctx.cluster, self.ctx.job_id, ev)
            rows[(key, fp, occurred)] = (
                occurred, fp, self.ctx.cluster, ev.node, key, ev.source, ev.kind, ev.role, _int4(ev.code), ev.gpu,
                _int4(ev.rank),
                ev.time is not None, ev.outcome, ev.action, ev.severity, ev.rule, ev.location, ev.message, ev.line,
                json.dumps(dict(ev.fields), sort_keys=True))
        ordered = [rows[k] for k in sorted(rows)]
        c = self.conn
        c.execute(text(
            f"CREATE TEMP TABLE IF NOT EXISTS _in_events ON COMMIT DELETE ROWS AS "
            f"SELECT {', '.join(EVENT_COLUMNS)} FROM attribution.events WITH NO DATA"))
        raw = c.connection.driver_connection
        with raw.cursor().copy(f"COPY _in_events ({', '.join(EVENT_COLUMNS)}) FROM STDIN") as cp:
            for r in ordered:
                cp.write_row(r)
        c.execute(text(
            "SELECT attribution.ensure_event_partition(m) FROM "
            "(SELECT DISTINCT date_trunc('month', occurred_at) AS m FROM _in_events) x"))
        cols = ", ".join(EVENT_COLUMNS)
        new = c.execute(text(f"""
            WITH ins AS (
              INSERT INTO attribution.events ({cols})
              SELECT {cols} FROM _in_events ORDER BY node_key, fingerprint, occurred_at
              ON CONFLICT (node_key, fingerprint, occurred_at) DO NOTHING
              RETURNING cluster, node, gpu, kind, code, role, outcome, source, occurred_at
            ), faults AS (
              -- what the fleet views can show: a node's own non-symptom, non-application events, and
              -- infrastructure causes found anywhere (symptoms and a job's own errors are not node faults)
              SELECT *, CASE WHEN source IN ('job', 'scheduler') THEN 'job' ELSE 'node' END AS scope FROM ins
              WHERE node IS NOT NULL
                AND ((source NOT IN ('job', 'scheduler') AND role <> 'symptom'
                      AND coalesce(outcome, '') <> 'application')
                     OR (role = 'cause' AND outcome IN {INFRA_SQL}))
            ), agg AS (
              SELECT cluster, node, coalesce(gpu, '') AS gpu_key, kind, coalesce(code, -1) AS code_key,
                     (date_trunc('week', occurred_at AT TIME ZONE 'UTC'))::date AS week,
                     min(role) AS role, min(outcome) AS outcome, min(scope) AS scope, count(*) AS n,
                     min(occurred_at) AS first_seen, max(occurred_at) AS last_seen
              FROM faults GROUP BY 1, 2, 3, 4, 5, 6
            ), wk AS (
              INSERT INTO attribution.fault_weeks AS f
                (cluster, node, gpu_key, kind, code_key, week, role, outcome, scope, events, first_seen, last_seen)
              SELECT cluster, node, gpu_key, kind, code_key, week, role, outcome, scope, n, first_seen, last_seen
              FROM agg ORDER BY cluster, node, gpu_key, kind, code_key, week
              ON CONFLICT (cluster, node, gpu_key, kind, code_key, week) DO UPDATE
                SET events = f.events + excluded.events,
                    first_seen = least(f.first_seen, excluded.first_seen),
                    last_seen = greatest(f.last_seen, excluded.last_seen)
              RETURNING cluster, node, gpu_key, kind, code_key, week, (xmax = 0) AS new_week
            ), series AS (
              SELECT a.cluster, a.node, a.gpu_key, a.kind, a.code_key, min(a.role) AS role, min(a.outcome) AS outcome,
                     min(a.scope) AS scope, sum(a.n) AS n, count(*) FILTER (WHERE w.new_week) AS new_weeks,
                     min(a.first_seen) AS first_seen, max(a.last_seen) AS last_seen
              FROM agg a JOIN wk w USING (cluster, node, gpu_key, kind, code_key, week)
              GROUP BY 1, 2, 3, 4, 5
            ), up AS (
              INSERT INTO attribution.fault_series AS s
                (cluster, node, gpu_key, kind, code_key, role, outcome, scope, events, weeks, first_seen, last_seen)
              SELECT cluster, node, gpu_key, kind, code_key, role, outcome, scope, n, new_weeks, first_seen, last_seen
              FROM series ORDER BY cluster, node, gpu_key, kind, code_key
              ON CONFLICT (cluster, node, gpu_key, kind, code_key) DO UPDATE
                SET events = s.events + excluded.events,
                    weeks = s.weeks + excluded.weeks,
                    first_seen = least(s.first_seen, excluded.first_seen),
                    last_seen = greatest(s.last_seen, excluded.last_seen)
              RETURNING 1
            )
            SELECT (SELECT count(*) FROM ins), (SELECT count(*) FROM up)""")).first()[0]
        # the link on the job's side (job_events, by job_id) and on the event's (event_jobs, by node_key)
        linked = 0 if not link else c.execute(text("""
            WITH l AS (
              INSERT INTO attribution.job_events (job_id, job_ref, node_key, event_id, event_time)
              SELECT :jid, :job, e.node_key, e.id, e.occurred_at
              FROM _in_events i JOIN attribution.events e
                ON e.node_key = i.node_key AND e.fingerprint = i.fingerprint AND e.occurred_at = i.occurred_at
              ORDER BY e.id
              ON CONFLICT (job_id, job_ref, event_id) DO NOTHING
              RETURNING node_key, event_id, event_time
            ), ej AS (
              INSERT INTO attribution.event_jobs (node_key, event_id, event_time, job_id, job_ref)
              SELECT node_key, event_id, event_time, :jid, :job FROM l ORDER BY node_key, event_id
              ON CONFLICT (node_key, event_id, job_ref) DO NOTHING
              RETURNING 1
            ) SELECT (SELECT count(*) FROM l), (SELECT count(*) FROM ej)"""),
            {"jid": self.job.job_id, "job": self.job.id}).first()[0]
        c.execute(text("TRUNCATE _in_events"))
        return int(new), int(linked)

    def events(self) -> list[Event]:
        rows = job_event_rows(self.conn, self.job.job_id, self.job.id, EVENT_ROW)
        return [event_from_row(r) for r in rows]

    # -- coverage -----------------------------------------------------------------------------------------------
    def set_coverage(self, coverage: Iterable[Coverage]) -> None:
        rows = [{"jid": self.job.job_id, "job": self.job.id, "source": c.source, "node": c.node or "",
                 "file": c.file or "",
                 "status": c.status, "lines": c.lines, "reason": c.reason, "notes": list(c.notes)}
                for c in coverage]
        if not rows:
            return
        rows.sort(key=lambda r: (r["source"], r["node"], r["file"]))
        self.conn.execute(text(
            "INSERT INTO attribution.coverage (job_id, job_ref, source, node_key, file_key, status, lines, reason, "
            "notes) VALUES (:jid, :job, :source, :node, :file, :status, :lines, :reason, :notes) "
            "ON CONFLICT (job_id, job_ref, source, node_key, file_key) DO UPDATE SET status = excluded.status, "
            "lines = excluded.lines, reason = excluded.reason, notes = excluded.notes, "
            "reported_at = excluded.reported_at"), rows)

    def set_counters(self, telemetry: Mapping) -> int:
        """Keep the absolute counter values of each device in each snapshot ({node: (prolog, epilog)}): every GPU
        and port, and the PCI devices whose AER counters are not all zero. Returns the rows written."""
        rows = []
        for node, pair in sorted(telemetry.items()):
            for snap in pair:
                if snap is None:
                    continue
                taken = self.ctx.start if snap.phase == "prolog" else self.ctx.end
                for kind, devices in (("gpu", snap.gpus), ("ib_port", snap.ports), ("pci", snap.pci)):
                    for device, values in sorted(devices.items()):
                        if kind == "pci" and not any(values.values()):
                            continue
                        info = dict(snap.gpu_info.get(device, {})) if kind == "gpu" else {}
                        rows.append({"jid": self.job.job_id, "job": self.job.id, "cluster": self.ctx.cluster, "node": node, "kind": kind,
                                     "device": device, "phase": snap.phase, "taken": taken,
                                     "counters": json.dumps(dict(values), sort_keys=True),
                                     "info": json.dumps(info, sort_keys=True)})
        if rows:
            self.conn.execute(text(
                "INSERT INTO attribution.device_counters (job_id, job_ref, cluster, node, device_kind, device, phase, "
                "taken_at, counters, info) VALUES (:jid, :job, :cluster, :node, :kind, :device, :phase, :taken, "
                "CAST(:counters AS jsonb), CAST(:info AS jsonb)) "
                "ON CONFLICT (job_id, job_ref, node, device_kind, device, phase) DO UPDATE SET "
                "taken_at = excluded.taken_at, counters = excluded.counters, info = excluded.info, "
                "stored_at = excluded.stored_at"), rows)
        return len(rows)

    def coverage(self) -> list[Coverage]:
        rows = self.conn.execute(text(
            "SELECT source, node_key, status, lines, reason, file_key, notes FROM attribution.coverage "
            "WHERE job_id = :jid AND job_ref = :id"), self._key()).all()
        return [Coverage(source=r[0], node=r[1] or None, status=r[2], lines=int(r[3]), reason=r[4], file=r[5] or None,
                         notes=tuple(r[6] or ())) for r in rows]

    # -- verdicts ----------------------------------------------------------------------------------------------
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
            "root_kind, root_code, root_node, root_gpu, root_time, culprit_nodes, explanation, rules_version, "
            "input_digest, document) VALUES (:jid, :job, :o, :conf, :a, :rid, :rk, :rc, :rn, :rg, :rt, :cul, :ex, "
            ":rv, :dg, CAST(:doc AS jsonb)) RETURNING id"),
            {"jid": self.job.job_id, "job": self.job.id, "o": verdict.outcome, "conf": verdict.confidence,
             "a": verdict.action,
             "rid": root_id, "rk": root.kind if root else None, "rc": root.code if root else None,
             "rn": root.node if root else None, "rg": root.gpu if root else None,
             "rt": root.time if root else None, "cul": [n for n, _ in verdict.culprits],
             "ex": verdict.explanation, "rv": verdict.rules_version, "dg": digest,
             "doc": json.dumps(document)}).scalar_one()
        self._save_roles(verdict, vid, ids)
        self.conn.execute(text("UPDATE attribution.jobs SET current_verdict_id = :v, updated_at = now() "
                               "WHERE job_id = :jid AND id = :id"), self._key(v=vid))
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
        # mention is 'unattributed', the column default)
        self.conn.execute(text(
            "UPDATE attribution.job_events je SET role_in_job = x.role FROM ("
            "  SELECT l.event_id, coalesce(r.role, 'unattributed') AS role FROM attribution.job_events l"
            "  LEFT JOIN (SELECT unnest(CAST(:ids AS bigint[])) AS id, unnest(CAST(:roles AS text[])) AS role) r"
            "    ON r.id = l.event_id"
            "  WHERE l.job_id = :jid AND l.job_ref = :id) x "
            "WHERE je.job_id = :jid AND je.job_ref = :id AND je.event_id = x.event_id "
            "AND je.role_in_job IS DISTINCT FROM x.role"),
            self._key(ids=list(roles), roles=list(roles.values())))


EVENT_ROW = ("e.kind, e.role, e.rule, e.source, e.location, e.line, e.message, e.node, e.gpu, e.code, e.rank, "
             "CASE WHEN e.time_exact THEN e.occurred_at END, e.outcome, e.action, e.severity, e.fields")


def pending_jobs(conn: Connection) -> list[tuple[JobRef, ExecutionContext]]:
    """Jobs whose stored evidence is newer than their verdict, oldest first, with their stored contexts."""
    rows = conn.execute(text(
        "SELECT id, cluster, job_id, start_time, context FROM attribution.jobs WHERE evidence_seq > attributed_seq "
        "ORDER BY id")).all()
    return [(JobRef(r[0], r[1], r[2], r[3]), context_from_json(r[4])) for r in rows]


def _root_key(cluster: str, outcome, node, gpu, kind, code, when) -> tuple | None:
    """The failed_roots row a verdict counts in: failed jobs whose root cause is an infrastructure fault on a node."""
    if outcome not in INFRASTRUCTURE_OUTCOMES or not node or not kind or when is None:
        return None
    day = when.astimezone(UTC).date()
    return (cluster, node, gpu or "", kind, -1 if code is None else int(code), day - timedelta(days=day.weekday()))


def verdict_digest(document: dict) -> str:
    """What makes two verdicts the same: everything but the wording of symptoms' order-independent fields."""
    return hashlib.sha256(json.dumps(document, sort_keys=True, default=str).encode()).hexdigest()
