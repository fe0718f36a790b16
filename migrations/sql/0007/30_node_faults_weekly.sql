-- Faults per node, ISO week (Monday), kind and code, with the failed jobs whose root cause was that fault on
-- that node in that week. Node faults are what a node's own logs report (symptoms and application errors
-- left out) and infrastructure causes found elsewhere (e.g. a NODE_FAIL from the scheduler).
-- Reads the rollups kept at ingest (fault_weeks, failed_roots), not every event and every job.
CREATE VIEW attribution.node_faults_weekly AS
WITH roots AS (
    SELECT cluster, node, kind, code_key, week, sum(jobs) AS jobs_failed
    FROM attribution.failed_roots
    WHERE jobs > 0
    GROUP BY cluster, node, kind, code_key, week
)
SELECT f.cluster,
       f.node,
       f.week,
       f.kind,
       NULLIF(f.code_key, -1)                  AS code,
       sum(f.events)::bigint                   AS events,
       coalesce(max(r.jobs_failed), 0)::bigint AS jobs_failed
FROM attribution.fault_weeks f
LEFT JOIN roots r ON r.cluster = f.cluster AND r.node = f.node AND r.kind = f.kind AND r.code_key = f.code_key
                 AND r.week = f.week
WHERE f.node <> ''
  AND ((f.scope = 'node' AND f.role <> 'symptom' AND coalesce(f.outcome, '') <> 'application')
       OR (f.role = 'cause' AND f.outcome IN ('gpu_hardware', 'nvlink', 'nvswitch_fabric', 'network', 'host')))
GROUP BY f.cluster, f.node, f.week, f.kind, f.code_key;
