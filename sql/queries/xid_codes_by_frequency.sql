-- Which Xid codes did the fleet see most in the last 30 days, on how many GPUs, and how often as a root cause?
-- (each side is aggregated on its own and then joined: no correlated subquery, so it also runs on Citus)
WITH seen AS (
    SELECT e.code, e.kind, count(*) AS events, count(DISTINCT (e.cluster, e.node, e.gpu)) AS gpus
    FROM attribution.fault_events e
    WHERE e.rule = 'kernel.xid' AND e.occurred_at >= now() - interval '30 days'
    GROUP BY e.code, e.kind
), roots AS (
    SELECT v.root_code AS code, v.root_kind AS kind, count(*) AS as_root
    FROM attribution.job_verdicts v
    WHERE v.job_end >= now() - interval '30 days'
    GROUP BY v.root_code, v.root_kind
)
SELECT s.code AS xid, s.kind, s.events, s.gpus, coalesce(r.as_root, 0) AS as_root
FROM seen s
LEFT JOIN roots r ON r.code = s.code AND r.kind = s.kind
ORDER BY s.events DESC;
