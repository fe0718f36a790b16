"""A job's events in the store: each stored once (whatever other jobs saw it), linked to the job, and counted
in the fleet rollups (fault_weeks, fault_series) in the same statement.

Every statement about events names their `node_key` (the distribution column of the per-node tables, links.py),
and a job's links are written on both sides (job_events by job_id, event_jobs by node_key)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Sequence

from sqlalchemy import Connection, text

from attribution.model import INFRASTRUCTURE_OUTCOMES, Event, ExecutionContext
from attribution.store.codec import event_from_row, event_from_stored, fingerprint
from attribution.store.links import EVENT_ROW, JOB_SCOPED_SOURCES, job_event_rows, node_key

UTC = timezone.utc
#: model.INFRASTRUCTURE_OUTCOMES as an SQL list.
INFRA_SQL = "(" + ", ".join(f"'{o}'" for o in sorted(INFRASTRUCTURE_OUTCOMES)) + ")"
EVENT_COLUMNS = ("occurred_at", "fingerprint", "cluster", "node", "node_key", "source", "evidence", "kind", "role",
                 "code", "gpu", "rank", "time_exact", "outcome", "action", "severity", "rule", "location", "message",
                 "line", "fields")


def _int4(v: int | None) -> int | None:
    """Events from a spool file or the API are not trusted to fit the integer columns: out of range is unknown."""
    return v if v is None or -2**31 < v < 2**31 else None


#: Events, rollups and (with `links`) the links of the events inserted, in one statement; returns the inserted
#: events' (id, fingerprint).
_INSERT_EVENTS = f"""
    WITH ins AS (
      INSERT INTO attribution.events ({", ".join(EVENT_COLUMNS)})
      SELECT {", ".join(EVENT_COLUMNS)} FROM _in_events ORDER BY node_key, fingerprint, occurred_at
      ON CONFLICT (node_key, fingerprint, occurred_at) DO NOTHING
      RETURNING id, cluster, node, node_key, fingerprint, gpu, kind, code, role, outcome, source, occurred_at
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
    ){{links}}
    SELECT id, fingerprint FROM ins"""
#: The links of the events just inserted, on the job's side (job_events, by job_id) and on the event's
#: (event_jobs, by node_key); an event new to the store is new to the job.
_NEW_LINKS = """, l AS (
      INSERT INTO attribution.job_events (job_id, job_ref, node_key, event_id, event_time)
      SELECT :jid, :job, node_key, id, occurred_at FROM ins ORDER BY id
      RETURNING node_key, event_id, event_time
    ), ej AS (
      INSERT INTO attribution.event_jobs (node_key, event_id, event_time, job_id, job_ref)
      SELECT node_key, event_id, event_time, :jid, :job FROM l ORDER BY node_key, event_id
      RETURNING 1
    )"""
#: The links of the batch's events that were stored before (a statement of its own: it sees what other
#: transactions committed while the insert waited on their rows). Returns how many links are new.
_OLD_LINKS = """
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
    ) SELECT count(*) FROM l"""


class Batch:
    """Events as add_events writes them: `rows` (EVENT_COLUMNS order, fingerprint order) under their `keys`
    (node_key, fingerprint, time); per row the Event in hand when it reads back equal to it (else None: its code
    or rank did not fit), and, once stored and linked, its id when this transaction inserted it."""

    __slots__ = ("keys", "rows", "_events", "ids")

    def __init__(self, keys: list, rows: list, events: list) -> None:
        self.keys, self.rows, self._events, self.ids = keys, rows, events, []

    def events(self) -> list[Event]:
        """The Events the rows read back as (codec.event_from_row of links.EVENT_ROW)."""
        return [e if e is not None else event_from_stored(r) for r, e in zip(self.rows, self._events)]


class JobEvents:
    """Storing and reading a job's events (part of writer.JobSession)."""

    conn: Connection
    ctx: ExecutionContext
    #: whether this transaction created the job's row (JobRow._find_or_create)
    created: bool
    #: the batches add_events(link=True) stored in this transaction
    _linked_batches: list

    # -- events ----------------------------------------------------------------------------------------------
    def batch(self, events: Sequence[Event]) -> "Batch":
        """The rows add_events writes for `events`: one per fingerprint (the last event of each), in fingerprint
        order, with the Event each reads back as."""
        placement = self.ctx.end or datetime.now(UTC)
        rows = {}
        for ev in events:
            scope = f"{self.ctx.cluster}/{self.ctx.job_id}" if ev.source in JOB_SCOPED_SOURCES else ""
            fp = fingerprint(self.ctx.cluster, ev, scope)
            occurred = ev.time or placement
            key = node_key(self.ctx.cluster, self.ctx.job_id, ev)
            code, rank = _int4(ev.code), _int4(ev.rank)
            rows[(key, fp, occurred)] = ((
                occurred, fp, self.ctx.cluster, ev.node, key, ev.source, ev.evidence, ev.kind, ev.role,
                code, ev.gpu, rank,
                ev.time is not None, ev.outcome, ev.action, ev.severity, ev.rule, ev.location, ev.message, ev.line,
                json.dumps(dict(ev.fields), sort_keys=True) if ev.fields else "{}"),
                ev if code == ev.code and rank == ev.rank else None)
        keys = sorted(rows)
        return Batch(keys, [rows[k][0] for k in keys], [rows[k][1] for k in keys])

    def add_events(self, events: Sequence[Event], link: bool = True, batch: "Batch | None" = None) -> tuple[int, int]:
        """Store events (once each, whatever other jobs saw them) and, with `link`, link them to this job.
        Events outside the job's window are stored for fleet trends without a link. `batch`: self.batch(events)
        made already. Returns (events new to the store, links new to this job).

        One statement stores the events, counts them in the rollups and links those it inserted (their ids from
        `INSERT ... RETURNING`); only when some were in the store already does a second one link those."""
        b = batch if batch is not None else self.batch(events)
        if not b.rows:
            return 0, 0
        c = self.conn
        c.execute(text(
            f"CREATE TEMP TABLE IF NOT EXISTS _in_events ON COMMIT DELETE ROWS AS "
            f"SELECT {', '.join(EVENT_COLUMNS)} FROM attribution.events WITH NO DATA"))
        raw = c.connection.driver_connection
        with raw.cursor().copy(f"COPY _in_events ({', '.join(EVENT_COLUMNS)}) FROM STDIN") as cp:
            for r in b.rows:
                cp.write_row(r)
        # no partition is made here: ingest never changes the database's shape (a time stamp no month partition
        # covers lands in events_default; `ensure_event_partitions` makes the coming year's ahead of time)
        params = {"jid": self.job.job_id, "job": self.job.id}
        inserted = c.execute(text(_INSERT_EVENTS.format(links=_NEW_LINKS if link else "")), params).all()
        linked = len(inserted) if link else 0
        if link and len(inserted) < len(b.rows):  # some were stored before (another job's, an earlier piece)
            linked += int(c.execute(text(_OLD_LINKS), params).scalar_one())
        c.execute(text("TRUNCATE _in_events"))  # empty for the next batch of this transaction, whoever's it is
        if link:  # within one batch the fingerprint says the rest of the key (node_key and time follow from it)
            ids = {bytes(r[1]): r[0] for r in inserted}
            b.ids = [ids.get(k[1]) for k in b.keys]
            self._linked_batches.append(b)
        return len(inserted), linked

    def fresh(self) -> Batch | None:
        """The one batch that is everything linked to the job, when this transaction created the job and every
        event of it was new to the store (so stored exactly as in hand)."""
        if self.created and len(self._linked_batches) == 1 and None not in self._linked_batches[0].ids:
            return self._linked_batches[0]
        return None

    def stored_events(self) -> tuple[list[Event], dict[tuple, int]]:
        """Every event linked to the job and their ids by (rule, location, kind, line). Of a fresh job (`fresh`)
        they are the events in hand as they read back (Batch.events), not read back."""
        b = self.fresh()
        if b is not None:
            return b.events(), {(r[16], r[17], r[7], r[19]): i for r, i in zip(b.rows, b.ids)}
        rows = job_event_rows(self.conn, self.job.job_id, self.job.id, EVENT_ROW + ", e.id")
        return [event_from_row(r[:-1]) for r in rows], {(r[2], r[4], r[0], r[5]): r[-1] for r in rows}

    def events(self) -> list[Event]:
        return self.stored_events()[0]
