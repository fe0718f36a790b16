-- Failed jobs whose workload failed before on the same root cause (outcome, kind, code): failure_number 2 is the
-- second such failure. A workload is one user's jobs on one cluster that share a base job id (a job id and its
-- requeues, the tasks of one job array) or a job name (a resubmission under a new job id); a job without a name
-- takes the name of a job of its base id that has one. `workload` is the name, else the base job id
-- (`workload_by` says which: job_name or job_id); `job_name` is the job's own name. Job names
-- are user-written: they group only the jobs of one known user (never two users', never a job whose user is not
-- known), and nothing that drains a node reads them. The same rule as the verdicts' `recurrence`
-- (attribution/store/recurrence.py).
CREATE VIEW attribution.failure_recurrence AS
SELECT cluster, job_id, user_name, workload, workload_by, job_name, job_start, job_end, outcome, root_kind, root_code, root_node,
       failure_number, first_job_id, job_ref
FROM (
    SELECT f.*,
           coalesce(f.named, f.base_id)                                         AS workload,
           CASE WHEN f.named IS NULL THEN 'job_id' ELSE 'job_name' END           AS workload_by,
           row_number() OVER w                                                  AS failure_number,
           first_value(f.job_id) OVER w                                         AS first_job_id
    FROM (
        SELECT j.cluster,
               j.job_id,
               j.user_name,
               nullif(j.job_name, '')                                           AS job_name,
               split_part(j.job_id, '_', 1)                                     AS base_id,
               CASE WHEN j.user_name IS NOT NULL THEN
                   coalesce(nullif(j.job_name, ''), max(nullif(j.job_name, ''))
                       OVER (PARTITION BY j.cluster, j.user_name, split_part(j.job_id, '_', 1)))
               END                                                              AS named,
               j.start_time                                                     AS job_start,
               j.end_time                                                       AS job_end,
               v.outcome,
               v.root_kind,
               v.root_code,
               v.root_node,
               j.id                                                             AS job_ref
        FROM attribution.jobs j
        JOIN attribution.verdicts v ON v.job_id = j.job_id AND v.id = j.current_verdict_id
        WHERE v.outcome <> 'none' AND v.root_kind IS NOT NULL
    ) f
    WINDOW w AS (PARTITION BY f.cluster, f.user_name, f.named IS NOT NULL, coalesce(f.named, f.base_id), f.outcome,
                              f.root_kind, coalesce(f.root_code, -1)
                 ORDER BY f.job_start, f.job_ref)
) x
WHERE failure_number >= 2;
