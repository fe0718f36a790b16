-- How many GPU-hours did failed jobs burn each week, by what broke (node count x GPUs per node x run time)?
SELECT (date_trunc('week', job_end AT TIME ZONE 'UTC'))::date AS week,
       outcome,
       count(*) AS jobs,
       round(sum(extract(epoch FROM job_end - job_start) / 3600.0 * node_count * coalesce(gpus_per_node, 8))::numeric,
             1) AS gpu_hours
FROM attribution.job_verdicts
WHERE outcome IS NOT NULL AND outcome <> 'none' AND job_end IS NOT NULL
GROUP BY 1, 2
ORDER BY 1, gpu_hours DESC;
