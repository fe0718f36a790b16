-- What each failed job lost, from its current verdict's `cost` (docs/replay.md): GPUs x (end - last checkpoint
-- saved) when its output shows a timestamped checkpoint save, else GPUs x run time. It reads the verdict's `cost`
-- column (0007: the document's cost object, kept beside it), so a reader needs no right on the whole document.
CREATE VIEW attribution.lost_gpu_hours AS
SELECT j.cluster,
       j.job_id,
       j.user_name,
       j.start_time                                                    AS job_start,
       j.end_time                                                      AS job_end,
       v.outcome,
       v.root_kind,
       (v.cost ->> 'gpus')::int                                        AS gpus,
       v.cost ->> 'basis'                                              AS basis,
       (v.cost ->> 'last_checkpoint')::timestamptz                     AS last_checkpoint,
       ((v.cost ->> 'gpus')::int
        * (v.cost ->> 'run_hours')::float8)                            AS gpu_hours_run,
       (v.cost ->> 'gpu_hours_lost')::float8                           AS gpu_hours_lost,
       j.id                                                            AS job_ref,
       v.id                                                            AS verdict_id
FROM attribution.jobs j
JOIN attribution.verdicts v ON v.job_id = j.job_id AND v.id = j.current_verdict_id
WHERE jsonb_typeof(v.cost) = 'object';
