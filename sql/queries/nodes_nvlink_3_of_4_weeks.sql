-- Which nodes had a fatal NVLink error in at least 3 of the last 4 ISO weeks?
SELECT cluster, node, count(DISTINCT week) AS weeks, sum(events) AS events, sum(jobs_failed) AS jobs_failed
FROM attribution.node_faults_weekly
WHERE kind = 'nvlink_error'
  AND week >= (date_trunc('week', now() AT TIME ZONE 'UTC') - interval '3 weeks')::date
GROUP BY cluster, node
HAVING count(DISTINCT week) >= 3
ORDER BY weeks DESC, events DESC;
