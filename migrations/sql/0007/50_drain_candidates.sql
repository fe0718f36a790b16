-- The nodes a drain policy (rules/drain-policy.yaml, loaded into drain_policies/drain_conditions by
-- `attribution drain plan|apply`) would drain at a time: one row per node, with a reason fit for Slurm's Reason field,
-- the evidence (every condition met, its events and jobs) and a score (the sum of the met conditions' scores).
-- Only infrastructure causes count, and only system-written evidence (kernel, Fabric Manager, scheduler state,
-- telemetry): an event from job output, or a culprit that only job output names, never drains a node
-- (docs/verdict.md "Evidence a user could have written"). Evidence older than a condition's window, or from before the node was
-- resumed (`attribution drain resume`), does not. `attribution drain plan` is a SELECT from this view.
-- The view is the plan now; `attribution drain plan --as-of T` and `drain backtest` call the function with a past
-- time (and a policy version): evidence after T does not count, nor a resume after T. Events already marked
-- handled are left out whenever they were handled (the partial index on unhandled causes stays usable).
-- Distributable (docs/store.md): the two MATERIALIZED steps each read one co-location group (a node's recent
-- causes with their job links, by node_key; the failed jobs with their verdicts, by job_id) and are computed on
-- the shards; what follows combines their few rows; no correlated subquery reads a table.
CREATE FUNCTION attribution.drain_candidates_at(as_of timestamptz, policy_version text DEFAULT NULL)
RETURNS TABLE (cluster text, node text, reason text, evidence jsonb, score real)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
-- the query with the time and the policy as literals: Citus plans no query of a function that has parameters
-- ("could not create distributed plan", measured), and the planner prunes to the months the window covers
RETURN QUERY EXECUTE format($q$
WITH policy AS (
    SELECT version, reason_prefix FROM attribution.drain_policies
    WHERE CAST(%2$L AS text) IS NULL OR version = CAST(%2$L AS text) ORDER BY loaded_at DESC, version LIMIT 1
), cond AS (
    SELECT c.*, p.reason_prefix FROM attribution.drain_conditions c JOIN policy p ON p.version = c.policy_version
), event_groups AS MATERIALIZED (
    SELECT e.cluster, e.node, e.node_key, CASE WHEN c.per = 'gpu' THEN e.gpu END AS gpu, c.condition_id, c.label,
           c.score, c.reason_prefix, c.min_count, min(c.distinct_by) AS distinct_by,
           count(DISTINCT e.id) AS events,
           count(DISTINCT ej.job_ref) AS jobs,
           count(DISTINCT date_trunc('week', e.occurred_at AT TIME ZONE 'UTC')) AS weeks,
           (array_agg(e.code ORDER BY e.occurred_at DESC, e.id DESC))[1] AS code,
           (array_agg(e.kind ORDER BY e.occurred_at DESC, e.id DESC))[1] AS kind,
           (array_agg(ej.job_id ORDER BY e.occurred_at DESC, e.id DESC) FILTER (WHERE ej.job_ref IS NOT NULL))[1]
               AS last_job_id,
           max(e.occurred_at) AS last_seen,
           array_agg(DISTINCT e.id) AS event_ids,
           coalesce(array_agg(DISTINCT ej.job_ref) FILTER (WHERE ej.job_ref IS NOT NULL), '{}') AS job_refs
    FROM cond c
    JOIN attribution.events e
      ON e.kind = ANY (c.kinds)
     AND e.occurred_at >= CAST(%1$L AS timestamptz) - make_interval(days => c.window_days)
     -- the widest window, as a constant for the planner: only the partitions and index range it covers are read
     AND e.occurred_at >= CAST(%1$L AS timestamptz) - make_interval(days => (SELECT max(window_days) FROM cond))
     AND e.occurred_at <= CAST(%1$L AS timestamptz)
     AND e.role = 'cause' AND e.handled_at IS NULL AND e.node IS NOT NULL AND e.evidence = 'system'
     AND coalesce(e.outcome, '') IN ('gpu_hardware', 'nvlink', 'nvswitch_fabric', 'network', 'host')
    LEFT JOIN attribution.event_jobs ej ON ej.node_key = e.node_key AND ej.event_id = e.id
    WHERE c.kinds IS NOT NULL
    GROUP BY e.cluster, e.node, e.node_key, CASE WHEN c.per = 'gpu' THEN e.gpu END, c.condition_id, c.label,
             c.score, c.reason_prefix, c.min_count
), culprits AS MATERIALIZED (
    SELECT j.cluster, n.node, c.condition_id, c.label, c.score, c.reason_prefix, c.culprit_distinct, c.min_count,
           j.id, j.job_id, j.end_time, j.user_name
    FROM cond c
    JOIN attribution.jobs j ON j.end_time >= CAST(%1$L AS timestamptz) - make_interval(days => c.window_days) AND j.end_time <= CAST(%1$L AS timestamptz)
     AND j.end_time >= CAST(%1$L AS timestamptz) - make_interval(days => (SELECT max(window_days) FROM cond))
    JOIN attribution.verdicts v ON v.job_id = j.job_id AND v.id = j.current_verdict_id
    CROSS JOIN LATERAL unnest(v.culprit_nodes, v.culprit_evidence) AS n(node, evidence)
    LEFT JOIN attribution.node_resumes r ON r.cluster = j.cluster AND r.node = n.node
    WHERE c.culprit_distinct IS NOT NULL AND n.evidence = 'system'
      AND v.outcome IN ('gpu_hardware', 'nvlink', 'nvswitch_fabric', 'network', 'host')
      AND j.end_time > coalesce(CASE WHEN r.resumed_at <= CAST(%1$L AS timestamptz) THEN r.resumed_at END, '-infinity')
), matches AS MATERIALIZED (
    SELECT cluster, node, gpu, condition_id, label, score, reason_prefix, kind, code, last_job_id, last_seen,
           event_ids, job_refs
    FROM event_groups
    WHERE CASE distinct_by WHEN 'events' THEN events WHEN 'jobs' THEN least(jobs, events) ELSE weeks END >= min_count
    UNION ALL
    SELECT cluster, node, NULL, condition_id, label, score, reason_prefix, NULL, NULL,
           (array_agg(job_id ORDER BY end_time DESC, id DESC))[1], max(end_time), '{}', array_agg(DISTINCT id)
    FROM culprits
    GROUP BY cluster, node, condition_id, label, score, reason_prefix, culprit_distinct, min_count
    HAVING CASE culprit_distinct WHEN 'users' THEN count(DISTINCT user_name) ELSE count(DISTINCT id) END
           >= min_count
), ranked AS MATERIALIZED (
    SELECT m.*, row_number() OVER (ORDER BY m.cluster, m.node, m.condition_id, m.gpu) AS match_no,
           row_number() OVER (PARTITION BY m.cluster, m.node ORDER BY m.score DESC, m.last_seen DESC, m.condition_id)
               AS pick
    FROM matches m
), match_jobs AS MATERIALIZED (
    -- each match's jobs, in the order they ended (jobs are found by id among the few the matches name)
    SELECT a.match_no,
           jsonb_agg(jsonb_build_object('cluster', x.cluster, 'job_id', x.job_id) ORDER BY x.end_time) AS jobs
    FROM ranked a
    CROSS JOIN LATERAL unnest(a.job_refs) AS r(job_ref)
    JOIN attribution.jobs x ON x.id = r.job_ref
    GROUP BY a.match_no
), evidence AS (
    SELECT a.cluster, a.node,
           jsonb_agg(jsonb_build_object(
               'condition', a.condition_id, 'kind', a.kind, 'code', a.code, 'gpu', a.gpu,
               'events', to_jsonb(a.event_ids), 'jobs', coalesce(mj.jobs, '[]'),
               'last_seen', a.last_seen) ORDER BY a.score DESC, a.condition_id, a.gpu) AS evidence,
           sum(a.score)::real AS score
    FROM ranked a LEFT JOIN match_jobs mj ON mj.match_no = a.match_no
    GROUP BY a.cluster, a.node
)
SELECT r.cluster,
       r.node,
       concat_ws(' ', r.reason_prefix, replace(r.label, '{code}', coalesce(r.code::text, '')),
                 'gpu ' || r.gpu, 'job ' || r.last_job_id)                                  AS reason,
       ev.evidence,
       ev.score
FROM ranked r
JOIN evidence ev ON ev.cluster = r.cluster AND ev.node = r.node
WHERE r.pick = 1
$q$, as_of, policy_version);
END
$fn$;

CREATE VIEW attribution.drain_candidates AS
SELECT cluster, node, reason, evidence, score FROM attribution.drain_candidates_at(now());
