-- Faults (per node, GPU, kind and code) seen in at least two distinct ISO weeks: the lemons.
CREATE VIEW attribution.recurring_faults AS
WITH roots AS (
    SELECT j.cluster, v.root_node AS node, coalesce(v.root_gpu, '') AS gpu_key, v.root_kind AS kind,
           coalesce(v.root_code, -1) AS code_key, count(DISTINCT j.id) AS jobs_failed
    FROM attribution.jobs j
    JOIN attribution.verdicts v ON v.id = j.current_verdict_id
    WHERE v.root_node IS NOT NULL AND v.outcome NOT IN ('none', 'application', 'scheduler')
    GROUP BY 1, 2, 3, 4, 5
), weeks AS (
    SELECT f.cluster, f.node, f.gpu_key, f.kind, f.code_key,
           min(f.first_seen) AS first_seen, max(f.last_seen) AS last_seen,
           count(DISTINCT f.week) AS weeks, sum(f.events)::bigint AS events
    FROM attribution.fault_weeks f
    WHERE f.node <> ''
  AND ((f.scope = 'node' AND f.role <> 'symptom' AND coalesce(f.outcome, '') <> 'application')
       OR (f.role = 'cause' AND f.outcome IN ('gpu_hardware', 'nvlink', 'nvswitch_fabric', 'network', 'host')))
    GROUP BY f.cluster, f.node, f.gpu_key, f.kind, f.code_key
    HAVING count(DISTINCT f.week) >= 2
)
SELECT w.cluster,
       w.node,
       NULLIF(w.gpu_key, '')          AS gpu,
       w.kind,
       NULLIF(w.code_key, -1)         AS code,
       w.first_seen,
       w.last_seen,
       w.weeks,
       w.events,
       coalesce(r.jobs_failed, 0)::bigint AS jobs_failed
FROM weeks w
LEFT JOIN roots r ON r.cluster = w.cluster AND r.node = w.node AND r.gpu_key = w.gpu_key AND r.kind = w.kind
                 AND r.code_key = w.code_key;
