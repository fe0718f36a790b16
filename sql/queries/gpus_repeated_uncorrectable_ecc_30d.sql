-- Which GPUs had more than one uncorrectable ECC event (double-bit, uncontained or contained) in the last 30 days?
SELECT cluster, node, gpu, count(*) AS events, array_agg(DISTINCT kind) AS kinds, min(occurred_at) AS first,
       max(occurred_at) AS last
FROM attribution.fault_events
WHERE kind IN ('gpu_ecc_dbe', 'gpu_ecc_uncontained', 'gpu_ecc_contained')
  AND occurred_at >= now() - interval '30 days'
GROUP BY cluster, node, gpu
HAVING count(*) > 1
ORDER BY events DESC, cluster, node;
