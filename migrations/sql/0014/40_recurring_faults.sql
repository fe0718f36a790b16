-- Faults (per node, GPU, kind and code) seen in at least two distinct ISO weeks: the lemons.
-- Reads two rollups kept at ingest with one row per (node, GPU, kind, code) whatever the length of the history:
-- fault_series for the events and weeks, failed_root_series for the failed jobs each fault was the root cause of
-- (summing failed_roots, one row per week, read every week of the history).
CREATE VIEW attribution.recurring_faults AS
SELECT s.cluster,
       s.node,
       NULLIF(s.gpu_key, '')              AS gpu,
       s.kind,
       NULLIF(s.code_key, -1)             AS code,
       s.first_seen,
       s.last_seen,
       s.weeks,
       s.events,
       coalesce(r.jobs, 0)::bigint        AS jobs_failed
FROM attribution.fault_series s
LEFT JOIN attribution.failed_root_series r
       ON r.cluster = s.cluster AND r.node = s.node AND r.gpu_key = s.gpu_key AND r.kind = s.kind
      AND r.code_key = s.code_key AND r.jobs > 0
WHERE s.weeks >= 2 AND s.node <> ''
  AND ((s.scope = 'node' AND s.role <> 'symptom' AND coalesce(s.outcome, '') <> 'application')
       OR (s.role = 'cause' AND s.outcome IN ('gpu_hardware', 'nvlink', 'nvswitch_fabric', 'network', 'host')));
