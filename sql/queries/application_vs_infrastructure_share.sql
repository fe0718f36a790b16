-- Of last month's failed jobs, what share was the users' own code and what share the infrastructure?
SELECT CASE WHEN outcome IN ('gpu_hardware', 'nvlink', 'nvswitch_fabric', 'network', 'host') THEN 'infrastructure'
            ELSE outcome END AS blame,
       count(*) AS jobs,
       round(100.0 * count(*) / sum(count(*)) OVER (), 1) AS percent
FROM attribution.job_verdicts
WHERE outcome IS NOT NULL AND outcome <> 'none' AND job_end >= now() - interval '30 days'
GROUP BY 1
ORDER BY jobs DESC;
