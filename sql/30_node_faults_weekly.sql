-- Faults per node, ISO week (Monday), kind and code, with the failed jobs whose root cause was that fault on
-- that node in that week. Node faults are what a node's own logs report (symptoms and application errors
-- left out) and infrastructure causes found elsewhere (e.g. a NODE_FAIL from the scheduler).
-- Reads the fault_weeks rollup kept at ingest, not every event.
CREATE VIEW attribution.node_faults_weekly AS
WITH roots AS (
    SELECT j.cluster, v.root_node AS node, v.root_kind AS kind, coalesce(v.root_code, -1) AS code_key,
           (date_trunc('week', coalesce(v.root_time, j.end_time, j.start_time) AT TIME ZONE 'UTC'))::date AS week,
           count(DISTINCT j.id) AS jobs_failed
    FROM attribution.jobs j
    JOIN attribution.verdicts v ON v.id = j.current_verdict_id
    WHERE v.root_node IS NOT NULL AND v.outcome NOT IN ('none', 'application', 'scheduler')
    GROUP BY 1, 2, 3, 4, 5
)
SELECT f.cluster,
       f.node,
       f.week,
       f.kind,
       NULLIF(f.code_key, -1)        AS code,
       sum(f.events)::bigint         AS events,
       coalesce(max(r.jobs_failed), 0)::bigint AS jobs_failed
FROM attribution.fault_weeks f
LEFT JOIN roots r ON r.cluster = f.cluster AND r.node = f.node AND r.kind = f.kind AND r.code_key = f.code_key
                 AND r.week = f.week
WHERE f.node <> ''
  AND ((f.scope = 'node' AND f.role <> 'symptom' AND coalesce(f.outcome, '') <> 'application')
       OR (f.role = 'cause' AND f.outcome IN ('gpu_hardware', 'nvlink', 'nvswitch_fabric', 'network', 'host')))
GROUP BY f.cluster, f.node, f.week, f.kind, f.code_key;
