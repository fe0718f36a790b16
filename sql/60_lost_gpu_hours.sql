-- What each failed job lost, from its current verdict's `cost` (docs/replay.md): GPUs x (end - last checkpoint
-- saved) when its output shows a timestamped checkpoint save, else GPUs x run time.
CREATE VIEW attribution.lost_gpu_hours AS
SELECT j.cluster,
       j.job_id,
       j.user_name,
       j.start_time                                                    AS job_start,
       j.end_time                                                      AS job_end,
       v.outcome,
       v.root_kind,
       (v.document -> 'cost' ->> 'gpus')::int                          AS gpus,
       v.document -> 'cost' ->> 'basis'                                AS basis,
       (v.document -> 'cost' ->> 'last_checkpoint')::timestamptz       AS last_checkpoint,
       ((v.document -> 'cost' ->> 'gpus')::int
        * (v.document -> 'cost' ->> 'run_hours')::float8)              AS gpu_hours_run,
       (v.document -> 'cost' ->> 'gpu_hours_lost')::float8             AS gpu_hours_lost,
       j.id                                                            AS job_ref,
       v.id                                                            AS verdict_id
FROM attribution.jobs j
JOIN attribution.verdicts v ON v.id = j.current_verdict_id
WHERE jsonb_typeof(v.document -> 'cost') = 'object';
