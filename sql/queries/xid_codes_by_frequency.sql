-- Which Xid codes did the fleet see most in the last 30 days, on how many GPUs, and how often as a root cause?
SELECT e.code AS xid, e.kind, count(*) AS events, count(DISTINCT (e.cluster, e.node, e.gpu)) AS gpus,
       (SELECT count(*) FROM attribution.job_verdicts v
        WHERE v.root_code = e.code AND v.root_kind = e.kind AND v.job_end >= now() - interval '30 days') AS as_root
FROM attribution.fault_events e
WHERE e.rule = 'kernel.xid' AND e.occurred_at >= now() - interval '30 days'
GROUP BY e.code, e.kind
ORDER BY events DESC;
