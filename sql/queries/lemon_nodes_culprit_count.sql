-- Which nodes were the culprit of the most failed jobs in the last 90 days, and of how many users' jobs?
SELECT cluster, node, count(*) AS failed_jobs, count(DISTINCT user_name) AS users,
       array_agg(DISTINCT root_kind) AS root_kinds
FROM attribution.job_verdicts, unnest(culprit_nodes) AS node
WHERE job_end >= now() - interval '90 days'
GROUP BY cluster, node
ORDER BY failed_jobs DESC, cluster, node
LIMIT 20;
