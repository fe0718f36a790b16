-- One row per job with its current verdict: what broke, where, what to do.
-- (jobs and verdicts are co-located by job_id: the join carries it.)
CREATE VIEW attribution.job_verdicts AS
SELECT j.cluster,
       j.job_id,
       j.start_time                AS job_start,
       j.end_time                  AS job_end,
       j.state,
       j.exit_code,
       j.user_name,
       j.partition,
       cardinality(j.nodes)        AS node_count,
       j.gpus_per_node,
       v.outcome,
       v.action,
       v.confidence,
       v.root_kind,
       v.root_code,
       v.root_node,
       v.root_gpu,
       v.root_time,
       v.culprit_nodes,
       v.explanation,
       v.created_at                AS verdict_at,
       v.rules_version,
       j.id                        AS job_ref,
       v.id                        AS verdict_id
FROM attribution.jobs j
LEFT JOIN attribution.verdicts v ON v.job_id = j.job_id AND v.id = j.current_verdict_id;
