"""A production-rate fleet year generated inside PostgreSQL, for the fleet-query benchmark 4b.

The fleet of issue 16: 10,000 nodes with 8 GPUs each (80,000 GPUs) ending JOBS_PER_WEEK (100,000) jobs a week, each
on 1 to 8 nodes; unexpected interruptions at the rate the Llama 3 report gives (419 in 54 days on 16,384 GPUs:
about 8 a day per 16,000 GPUs, so 40 a day on this fleet), 78 % of them hardware (a GPU off the bus, ECC, NVLink,
firmware: one cause event on the GPU, most on the fleet's lemons as in bench/history.py), the rest software (no
node cause); every interrupted job has 20 symptoms (NCCL errors in its output) per node it ran on. Every job has a
row and a current verdict made when it ended (`none` for the jobs that were not interrupted), every event its job
links; the rollups are rebuilt from the raw tables with the ingest's definitions (history.rebuild_rollups).
"""

from __future__ import annotations

from sqlalchemy import Engine, text

from bench.history import CAUSE_CODES, CAUSE_OUTCOMES, CAUSES, LEMON_GPUS, rebuild_rollups

NODES = 10_000
GPUS_PER_NODE = 8
JOBS_PER_WEEK = 100_000
INTERRUPTIONS_PER_DAY = 8 * NODES * GPUS_PER_NODE // 16_000  # 40
HARDWARE_PERCENT = 78
SYMPTOMS_PER_NODE = 20


def fill_year(engine: Engine, weeks: int = 52, jobs_per_week: int = JOBS_PER_WEEK, echo=lambda s: None) -> dict:
    """`weeks` weeks of the fleet going back from now, one transaction per week; returns the row counts."""
    every = max(1, jobs_per_week // (7 * INTERRUPTIONS_PER_DAY))  # one job in `every` is interrupted
    slot = 7 * 86400 / jobs_per_week  # seconds between two job ends
    with engine.begin() as c:
        c.execute(text("SET LOCAL statement_timeout = 0"))
        c.execute(text("SELECT attribution.ensure_event_partition(now() - make_interval(days => d)) "
                       "FROM generate_series(0, 7 * :w + 31, 28) d"), {"w": weeks})
        c.execute(text("SELECT attribution.ensure_event_partition(now())"))
    p = {"every": every, "slot": slot, "hw": HARDWARE_PERCENT, "spn": SYMPTOMS_PER_NODE}
    for w in range(weeks):
        p.update(lo=w * jobs_per_week, hi=(w + 1) * jobs_per_week - 1)
        with engine.begin() as c:
            c.execute(text("SET LOCAL statement_timeout = 0"))
            _week(c, p)
        echo(f"week {w + 1}/{weeks}")
    with engine.begin() as c:
        c.execute(text("SET LOCAL statement_timeout = 0"))
        rebuild_rollups(c)
        for table in ("jobs", "verdicts"):
            c.execute(text(f"SELECT setval(pg_get_serial_sequence('attribution.{table}', 'id'), "
                           f"(SELECT max(id) FROM attribution.{table}))"))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        c.execute(text("VACUUM ANALYZE"))
        return {t: c.execute(text(f"SELECT count(*) FROM attribution.{t}")).scalar()
                for t in ("jobs", "verdicts", "events", "job_events")}


#: job k: its end, whether it was interrupted (m: the interruption's number) and by hardware, its size, its GPU
JOB_ROWS = f"""
    SELECT k, t, intr, hw, n, m, g, CASE WHEN hw THEN g / {GPUS_PER_NODE} ELSE (k * 7919) % {NODES} END AS first
    FROM (SELECT k, t, intr, intr AND (m * 7) % 100 < :hw AS hw, 1 + (k * 37) % 8 AS n, m,
                 CASE WHEN (m * 31) % 10 < 8 THEN (m * 7) % {LEMON_GPUS}
                      ELSE (m * 104729) % ({NODES} * {GPUS_PER_NODE}) END AS g
          FROM (SELECT k, now() - make_interval(secs => k * :slot) AS t, k % :every = 0 AS intr, k / :every AS m
                FROM generate_series(CAST(:lo AS bigint), CAST(:hi AS bigint)) k) a) b"""


def _week(c, p: dict) -> None:
    c.execute(text(f"""
        INSERT INTO attribution.jobs (id, cluster, job_id, start_time, end_time, user_name, state, nodes,
                                      gpus_per_node, context, context_source, context_precedence, current_verdict_id,
                                      created_at, updated_at)
        SELECT k + 1, 'fleet', k::text, t - interval '4 hours', t, 'user' || (k % 997),
               CASE WHEN intr THEN 'FAILED' ELSE 'COMPLETED' END,
               ARRAY(SELECT 'n' || lpad(((first + i) % {NODES})::text, 5, '0') FROM generate_series(0, n - 1) i),
               {GPUS_PER_NODE}, '{{}}'::jsonb, 'bench', 3, k + 1, t, t
        FROM ({JOB_ROWS}) j"""), p)
    c.execute(text(f"""
        INSERT INTO attribution.verdicts (id, job_id, job_ref, created_at, outcome, confidence, action, root_kind,
                                          root_code, root_node, root_gpu, root_time, culprit_nodes, culprit_evidence,
                                          explanation, rules_version, input_digest, document)
        SELECT k + 1, k::text, k + 1, t,
               CASE WHEN hw THEN ({CAUSE_OUTCOMES})[1 + m % 5] WHEN intr THEN 'application' ELSE 'none' END,
               'high', CASE WHEN hw THEN 'drain_node' ELSE 'none' END,
               CASE WHEN hw THEN ({CAUSES})[1 + m % 5] END, CASE WHEN hw THEN ({CAUSE_CODES})[1 + m % 5] END,
               CASE WHEN hw THEN 'n' || lpad(first::text, 5, '0') END,
               CASE WHEN hw THEN '0000:' || lpad(to_hex(16 + g % {GPUS_PER_NODE}), 2, '0') || '\\:00' END,
               CASE WHEN hw THEN t - interval '10 minutes' END,
               CASE WHEN hw THEN ARRAY['n' || lpad(first::text, 5, '0')] ELSE '{{}}' END,
               CASE WHEN hw THEN ARRAY['system'] ELSE '{{}}' END,
               'generated', 'bench', md5(k::text), '{{}}'::jsonb
        FROM ({JOB_ROWS}) j"""), p)
    c.execute(text(f"""
        WITH ev AS (
          -- the cause of each hardware interruption, then SYMPTOMS_PER_NODE symptoms per node of each interrupted job
          SELECT k, t - interval '10 minutes' AS at, first AS node, 'kernel' AS source, ({CAUSES})[1 + m % 5] AS kind,
                 'cause' AS role, ({CAUSE_CODES})[1 + m % 5] AS code,
                 '0000:' || lpad(to_hex(16 + g % {GPUS_PER_NODE}), 2, '0') || '\\:00' AS gpu,
                 ({CAUSE_OUTCOMES})[1 + m % 5] AS outcome, 'cause' AS tag
          FROM ({JOB_ROWS}) j WHERE hw
          UNION ALL
          SELECT k, t - interval '9 minutes' + make_interval(secs => s), (first + i) % {NODES}, 'job', 'nccl_error',
                 'symptom', NULL, NULL, NULL, i || '.' || s
          FROM ({JOB_ROWS}) j, generate_series(0, n - 1) i, generate_series(1, :spn) s WHERE intr
        ), ins AS (
          INSERT INTO attribution.events (occurred_at, fingerprint, cluster, node, source, kind, role, code, gpu,
                                          rank, time_exact, outcome, action, severity, rule, location, message, line,
                                          node_key)
          SELECT at, decode(md5(k || '/' || tag), 'hex'), 'fleet', 'n' || lpad(node::text, 5, '0'), source, kind,
                 role, code, gpu, NULL, true, outcome, NULL, 'error', 'bench.generated', 'bench:' || k || ':' || tag,
                 'generated event', 'generated event', 'n' || lpad(node::text, 5, '0')
          FROM ev
          RETURNING node_key, id, occurred_at, split_part(location, ':', 2)::bigint AS k
        ), links AS (
          INSERT INTO attribution.job_events (job_id, job_ref, node_key, event_id, event_time)
          SELECT k::text, k + 1, node_key, id, occurred_at FROM ins
          RETURNING job_id, job_ref, node_key, event_id, event_time
        )
        INSERT INTO attribution.event_jobs (node_key, event_id, event_time, job_id, job_ref)
        SELECT node_key, event_id, event_time, job_id, job_ref FROM links"""), p)
