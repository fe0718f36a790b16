"""Fleet history generated inside PostgreSQL, for the fleet-query benchmark, at a fixed fleet rate.

The fleet: 10,000 nodes with 8 GPUs each (80,000 GPUs), one job per 100 events, jobs ending at a fixed rate
(JOBS_PER_WEEK): job k ends in the k-th slot back from now, so a history ten times as long is ten times as many
weeks of the same fleet, not ten times as much in the same year. Hardware is what it is, at the same rate all
along: one event in CAUSE_EVERY is a hardware cause (GPU off the bus, ECC, NVLink, firmware), one in CONTEXT_EVERY
a context event (Xid 63 row-remap notices), most causes on the fleet's lemons (2 % of the GPUs take 80 % of them),
the rest anywhere, as field reports describe; the other events are the jobs' own symptoms (NCCL errors). Causes
are linked to their job; jobs with a cause get a verdict with that root cause. The rollups (fault_weeks,
fault_series, failed_roots, failed_root_series) are rebuilt from the raw tables with the same definitions the
ingest path maintains, so the views read what they would read after ingesting this history.
"""

from __future__ import annotations

import statistics
import time

from sqlalchemy import Engine, text

NODES = 10_000
GPUS_PER_NODE = 8
LEMON_GPUS = 1_600
EVENTS_PER_JOB = 100
JOBS_PER_WEEK = 10_000 // 52  # 1,000,000 events are a year
CAUSE_EVERY = 20  # 50,000 hardware causes per 1,000,000 events
CONTEXT_EVERY = 10
INFRA = "('gpu_hardware', 'nvlink', 'nvswitch_fabric', 'network', 'host')"

CAUSES = "ARRAY['gpu_fallen_off_bus','gpu_ecc_dbe','nvlink_error','gpu_ecc_contained','gpu_xid_error']"
CAUSE_CODES = "ARRAY[79, 48, 74, 94, 119]"
CAUSE_OUTCOMES = "ARRAY['gpu_hardware','gpu_hardware','nvlink','gpu_hardware','gpu_hardware']"


def weeks_of(events: int, events_per_job: int = EVENTS_PER_JOB) -> float:
    """How many weeks of the fleet `events` events are."""
    return events / events_per_job / JOBS_PER_WEEK


def fill(engine: Engine, start_index: int, count: int, events_per_job: int = EVENTS_PER_JOB,
         cause_every: int = CAUSE_EVERY, context_every: int = CONTEXT_EVERY) -> None:
    """Events start_index .. start_index+count-1, going back in time from the ones before. Job k owns events
    k*events_per_job .. (k+1)*events_per_job-1 and ends in the k-th slot of 1/JOBS_PER_WEEK weeks before now.
    One event in `cause_every` is a hardware cause, one in `context_every` a context event."""
    per_job = events_per_job
    lo, hi = start_index, start_index + count - 1
    slot = 7 * 86400 // JOBS_PER_WEEK  # seconds between two job ends
    weeks = int(weeks_of(start_index + count, per_job)) + 1
    with engine.begin() as c:
        c.execute(text("SET LOCAL statement_timeout = 0"))
        c.execute(text(
            "SELECT attribution.ensure_event_partition(now() - make_interval(days => d)) "
            "FROM generate_series(0, 7 * :w + 31, 28) d"), {"w": weeks})
        c.execute(text("SELECT attribution.ensure_event_partition(now())"))
        # jobs for the new events: job k owns events k*100 .. k*100+99
        c.execute(text(f"""
            INSERT INTO attribution.jobs (cluster, job_id, start_time, end_time, user_name, state, nodes,
                                          gpus_per_node, context, context_source, context_precedence)
            SELECT 'fleet', k::text, t - interval '3 hours', t, 'user' || (k % 97), 'FAILED',
                   ARRAY['n' || lpad(((k * 7919) % {NODES})::text, 5, '0')], {GPUS_PER_NODE}, '{{}}'::jsonb, 'bench', 3
            FROM (SELECT k, now() - make_interval(secs => k * {slot} + (k * 2654435761) % {slot}) AS t
                  FROM generate_series(CAST(:lo AS bigint) / {per_job}, CAST(:hi AS bigint) / {per_job}) k) x
            ON CONFLICT DO NOTHING"""), {"lo": lo, "hi": hi})
        c.execute(text(f"""
            WITH ins AS (
            INSERT INTO attribution.events (occurred_at, fingerprint, cluster, node, source, kind, role, code, gpu,
                                            rank, time_exact, outcome, action, severity, rule, location, message,
                                            line, node_key)
            SELECT t, decode(md5(i::text), 'hex'), 'fleet', 'n' || lpad(node::text, 5, '0'),
                   CASE WHEN cls = 2 THEN 'job' ELSE 'kernel' END,
                   CASE WHEN cls = 2 THEN 'nccl_error' WHEN cls = 1 THEN 'gpu_row_remap_pending'
                        ELSE ({CAUSES})[1 + (i / 7) % 5] END,
                   CASE WHEN cls = 2 THEN 'symptom' WHEN cls = 1 THEN 'context' ELSE 'cause' END,
                   CASE WHEN cls = 2 THEN NULL WHEN cls = 1 THEN 63 ELSE ({CAUSE_CODES})[1 + (i / 7) % 5] END,
                   CASE WHEN cls = 2 THEN NULL ELSE '0000\\:' || lpad(to_hex(16 + gpu % {GPUS_PER_NODE}), 2, '0')
                        || '\\:00' END,
                   NULL, true,
                   CASE WHEN cls <> 0 THEN NULL ELSE ({CAUSE_OUTCOMES})[1 + (i / 7) % 5] END,
                   NULL, 'error', 'bench.generated', 'bench\\:' || i, 'generated event ' || i, 'generated event ' || i,
                   'n' || lpad(node::text, 5, '0')
            FROM (
              SELECT i, cls,
                     now() - make_interval(secs => (i / {per_job}) * {slot} + ((i / {per_job}) * 2654435761) % {slot}
                                                   + (i % {per_job}) * 7) AS t,
                     g AS gpu, g / {GPUS_PER_NODE} AS node
              FROM (SELECT i, cls,
                           CASE WHEN cls = 0 AND (i * 31) % 10 < 8 THEN (i * 7) % {LEMON_GPUS}
                                WHEN cls <= 1 THEN (i * 104729) % ({NODES} * {GPUS_PER_NODE})
                                ELSE (((i / {per_job}) * 7919) % {NODES}) * {GPUS_PER_NODE} END AS g
                    FROM (SELECT i, CASE WHEN :ce > 0 AND i % :ce = 0 THEN 0
                                         WHEN :xe > 0 AND i % :xe = 1 THEN 1 ELSE 2 END AS cls
                          FROM generate_series(CAST(:lo AS bigint), CAST(:hi AS bigint)) i) ci) gi
            ) e
            RETURNING node_key, id, occurred_at, role,
                      split_part(location, '\\:', 2)::bigint / {per_job} AS job_no
            ), links AS (
            INSERT INTO attribution.job_events (job_id, job_ref, node_key, event_id, event_time)
            SELECT j.job_id, j.id, ins.node_key, ins.id, ins.occurred_at
            FROM ins JOIN attribution.jobs j ON j.cluster = 'fleet' AND j.job_id = ins.job_no::text
            WHERE ins.role = 'cause'
            RETURNING job_id, job_ref, node_key, event_id, event_time
            )
            INSERT INTO attribution.event_jobs (node_key, event_id, event_time, job_id, job_ref)
            SELECT node_key, event_id, event_time, job_id, job_ref FROM links"""),
            {"lo": lo, "hi": hi, "ce": cause_every, "xe": context_every})
        c.execute(text("""
            WITH links AS MATERIALIZED (
              SELECT ej.job_id, ej.job_ref, e.id, e.kind, e.code, e.node, e.gpu, e.occurred_at, e.outcome
              FROM attribution.event_jobs ej JOIN attribution.events e
                ON e.node_key = ej.node_key AND e.id = ej.event_id AND e.occurred_at = ej.event_time
            ), fresh AS MATERIALIZED (
              SELECT l.*, j.end_time FROM links l JOIN attribution.jobs j ON j.job_id = l.job_id AND j.id = l.job_ref
              WHERE j.current_verdict_id IS NULL
            ), roots AS MATERIALIZED (
              SELECT DISTINCT ON (job_ref) * FROM fresh ORDER BY job_ref, occurred_at
            ), v AS (
              -- made when the job ended, as ingest makes it
              INSERT INTO attribution.verdicts (job_id, job_ref, created_at, outcome, confidence, action, root_event_id,
                                                root_kind, root_code, root_node, root_gpu, root_time, culprit_nodes,
                                                explanation, rules_version, input_digest, document, cause_event_ids)
              SELECT job_id, job_ref, end_time, outcome, 'high', 'drain_node', id, kind, code, node, gpu, occurred_at,
                     ARRAY[node],
                     'generated', 'bench', md5(job_ref::text), '{}'::jsonb, ARRAY[id]
              FROM roots RETURNING id, job_id, job_ref, outcome
            )
            UPDATE attribution.jobs j SET current_verdict_id = v.id, current_outcome = v.outcome FROM v
            WHERE j.job_id = v.job_id AND j.id = v.job_ref"""))
        rebuild_rollups(c)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        c.execute(text("VACUUM ANALYZE"))


def rebuild_rollups(c) -> None:
    c.execute(text("TRUNCATE attribution.fault_weeks, attribution.fault_series, attribution.failed_roots, "
                   "attribution.failed_root_series"))
    c.execute(text(f"""
        INSERT INTO attribution.fault_weeks (cluster, node, gpu_key, kind, code_key, week, role, outcome, scope,
                                             events, first_seen, last_seen)
        SELECT cluster, node, coalesce(gpu, ''), kind, coalesce(code, -1),
               (date_trunc('week', occurred_at AT TIME ZONE 'UTC'))::date, min(role), min(outcome),
               min(CASE WHEN source IN ('job', 'scheduler') THEN 'job' ELSE 'node' END), count(*),
               min(occurred_at), max(occurred_at)
        FROM attribution.events
        WHERE node IS NOT NULL
          AND ((source NOT IN ('job', 'scheduler') AND role <> 'symptom' AND coalesce(outcome, '') <> 'application')
               OR (role = 'cause' AND outcome IN {INFRA}))
        GROUP BY 1, 2, 3, 4, 5, 6"""))
    c.execute(text("""
        INSERT INTO attribution.fault_series (cluster, node, gpu_key, kind, code_key, role, outcome, scope, events,
                                              weeks, first_seen, last_seen)
        SELECT cluster, node, gpu_key, kind, code_key, min(role), min(outcome), min(scope), sum(events), count(*),
               min(first_seen), max(last_seen)
        FROM attribution.fault_weeks GROUP BY 1, 2, 3, 4, 5"""))
    c.execute(text(f"""
        INSERT INTO attribution.failed_roots (cluster, node, gpu_key, kind, code_key, week, jobs)
        SELECT j.cluster, v.root_node, coalesce(v.root_gpu, ''), v.root_kind, coalesce(v.root_code, -1),
               (date_trunc('week', coalesce(v.root_time, j.end_time) AT TIME ZONE 'UTC'))::date, count(*)
        FROM attribution.jobs j
        JOIN attribution.verdicts v ON v.job_id = j.job_id AND v.id = j.current_verdict_id
        WHERE v.root_node IS NOT NULL AND v.outcome IN {INFRA}
        GROUP BY 1, 2, 3, 4, 5, 6"""))
    c.execute(text("""
        INSERT INTO attribution.failed_root_series (cluster, node, gpu_key, kind, code_key, jobs)
        SELECT cluster, node, gpu_key, kind, code_key, sum(jobs) FROM attribution.failed_roots
        GROUP BY 1, 2, 3, 4, 5"""))


QUERIES = {
    "recurring_faults": "SELECT * FROM attribution.recurring_faults",
    "drain_plan": "SELECT * FROM attribution.drain_candidates",
    "node_faults_weekly": "SELECT * FROM attribution.node_faults_weekly WHERE week >= "
                          "(date_trunc('week', now()) - interval '4 weeks')::date",
}


def query_times(engine: Engine, repeat: int = 5) -> dict[str, float]:
    """The median time of each query on one store (after a warm-up)."""
    return compare_times([engine], repeat)[0]


def compare_times(engines: list[Engine], repeat: int = 5) -> list[dict[str, float]]:
    """The median time of each query on each store, the stores taking turns (each query runs once on every store,
    then again), so that the load of a shared machine falls on all of them alike."""
    from attribution.drain.policy import load_policy
    from attribution.rulepack.load import load_rules
    from attribution.store import drain as sd

    from .run import ROOT

    policy = load_policy(load_rules(ROOT / "rules"))
    conns = []
    for engine in engines:
        sd.load_policy(engine, policy)
        conns.append(engine.connect())
    try:
        ts: list[dict[str, list[float]]] = [{q: [] for q in QUERIES} for _ in engines]
        for c in conns:
            for sql in QUERIES.values():
                c.execute(text(sql)).all()  # warm
        for _ in range(repeat):
            for name, sql in QUERIES.items():
                for i, c in enumerate(conns):
                    t0 = time.perf_counter()
                    c.execute(text(sql)).all()
                    ts[i][name].append(time.perf_counter() - t0)
        return [{q: statistics.median(v) for q, v in t.items()} for t in ts]
    finally:
        for c in conns:
            c.close()
