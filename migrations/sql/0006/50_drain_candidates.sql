-- The nodes the current drain policy (rules/drain-policy.yaml, loaded into drain_policies/drain_conditions by
-- `attribution drain plan|apply`) would drain now: one row per node, with a reason fit for Slurm's Reason field,
-- the evidence (every condition met, its events and jobs) and a score (the sum of the met conditions' scores).
-- Only infrastructure causes count, and only system-written evidence (kernel, Fabric Manager, scheduler state,
-- telemetry): an event from job output, or a culprit that only job output names, never drains a node
-- (docs/verdict.md "Evidence a user could have written"). Evidence older than a condition's window, or from before the node was
-- resumed (`attribution drain resume`), does not. `attribution drain plan` is a SELECT from this view.
CREATE VIEW attribution.drain_candidates AS
WITH policy AS (
    SELECT version, reason_prefix FROM attribution.drain_policies ORDER BY loaded_at DESC, version LIMIT 1
), cond AS (
    SELECT c.*, p.reason_prefix FROM attribution.drain_conditions c JOIN policy p ON p.version = c.policy_version
), hits AS (
    SELECT c.condition_id, c.per, c.distinct_by, c.min_count, c.label, c.score, c.reason_prefix,
           e.cluster, e.node, e.gpu, e.kind, e.code, e.id AS event_id, e.occurred_at, je.job_ref
    FROM cond c
    JOIN attribution.events e
      ON e.kind = ANY (c.kinds)
     AND e.occurred_at >= now() - make_interval(days => c.window_days)
     -- the widest window, as a constant for the planner: only the partitions and index range it covers are read
     AND e.occurred_at >= now() - make_interval(days => (SELECT max(window_days) FROM cond))
     AND e.occurred_at <= now()
     AND e.role = 'cause' AND e.handled_at IS NULL AND e.node IS NOT NULL AND e.evidence = 'system'
     AND coalesce(e.outcome, '') IN ('gpu_hardware', 'nvlink', 'nvswitch_fabric', 'network', 'host')
    LEFT JOIN attribution.job_events je ON je.event_id = e.id AND je.event_time = e.occurred_at
    WHERE c.kinds IS NOT NULL
), event_groups AS (
    SELECT cluster, node, CASE WHEN per = 'gpu' THEN gpu END AS gpu, condition_id, label, score, reason_prefix,
           min_count, min(distinct_by) AS distinct_by,
           count(DISTINCT event_id) AS events,
           count(DISTINCT job_ref) AS jobs,
           count(DISTINCT date_trunc('week', occurred_at AT TIME ZONE 'UTC')) AS weeks,
           (array_agg(code ORDER BY occurred_at DESC, event_id DESC))[1] AS code,
           (array_agg(kind ORDER BY occurred_at DESC, event_id DESC))[1] AS kind,
           (array_agg(job_ref ORDER BY occurred_at DESC, event_id DESC) FILTER (WHERE job_ref IS NOT NULL))[1]
               AS last_job,
           max(occurred_at) AS last_seen,
           array_agg(DISTINCT event_id) AS event_ids,
           coalesce(array_agg(DISTINCT job_ref) FILTER (WHERE job_ref IS NOT NULL), '{}') AS job_refs
    FROM hits
    GROUP BY cluster, node, CASE WHEN per = 'gpu' THEN gpu END, condition_id, label, score, reason_prefix, min_count
), matches AS (
    SELECT cluster, node, gpu, condition_id, label, score, reason_prefix, kind, code, last_job, last_seen,
           event_ids, job_refs
    FROM event_groups
    WHERE CASE distinct_by WHEN 'events' THEN events WHEN 'jobs' THEN least(jobs, events) ELSE weeks END >= min_count
    UNION ALL
    SELECT j.cluster, n.node, NULL, c.condition_id, c.label, c.score, c.reason_prefix, NULL, NULL,
           (array_agg(j.id ORDER BY j.end_time DESC, j.id DESC))[1], max(j.end_time), '{}', array_agg(DISTINCT j.id)
    FROM cond c
    JOIN attribution.jobs j ON j.end_time >= now() - make_interval(days => c.window_days) AND j.end_time <= now()
     AND j.end_time >= now() - make_interval(days => (SELECT max(window_days) FROM cond))
    JOIN attribution.verdicts v ON v.id = j.current_verdict_id
    CROSS JOIN LATERAL unnest(v.culprit_nodes, v.culprit_evidence) AS n(node, evidence)
    LEFT JOIN attribution.node_resumes r ON r.cluster = j.cluster AND r.node = n.node
    WHERE c.culprit_distinct IS NOT NULL AND n.evidence = 'system'
      AND v.outcome IN ('gpu_hardware', 'nvlink', 'nvswitch_fabric', 'network', 'host')
      AND j.end_time > coalesce(r.resumed_at, '-infinity')
    GROUP BY j.cluster, n.node, c.condition_id, c.label, c.score, c.reason_prefix, c.culprit_distinct, c.min_count
    HAVING CASE c.culprit_distinct WHEN 'users' THEN count(DISTINCT j.user_name) ELSE count(DISTINCT j.id) END
           >= c.min_count
), ranked AS (
    SELECT m.*, jb.job_id AS last_job_id,
           row_number() OVER (PARTITION BY m.cluster, m.node ORDER BY m.score DESC, m.last_seen DESC, m.condition_id)
               AS pick
    FROM matches m LEFT JOIN attribution.jobs jb ON jb.id = m.last_job
)
SELECT r.cluster,
       r.node,
       concat_ws(' ', r.reason_prefix, replace(r.label, '{code}', coalesce(r.code::text, '')),
                 'gpu ' || r.gpu, 'job ' || r.last_job_id)                                  AS reason,
       (SELECT jsonb_agg(jsonb_build_object(
                   'condition', a.condition_id, 'kind', a.kind, 'code', a.code, 'gpu', a.gpu,
                   'events', to_jsonb(a.event_ids),
                   'jobs', (SELECT coalesce(jsonb_agg(jsonb_build_object('cluster', x.cluster, 'job_id', x.job_id)
                                                      ORDER BY x.end_time), '[]')
                            FROM attribution.jobs x WHERE x.id = ANY (a.job_refs)),
                   'last_seen', a.last_seen) ORDER BY a.score DESC, a.condition_id, a.gpu)
        FROM ranked a WHERE a.cluster = r.cluster AND a.node = r.node)                      AS evidence,
       (SELECT sum(a.score) FROM ranked a WHERE a.cluster = r.cluster AND a.node = r.node)::real AS score
FROM ranked r
WHERE r.pick = 1;
