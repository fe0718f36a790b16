-- Failed jobs whose workload (a user's job id on a cluster, its requeues, the tasks of one job array) failed
-- before on the same root cause (outcome, kind, code): failure_number 2 is the second such failure. The same rule
-- as the verdicts' `recurrence` (attribution/store/recurrence.py).
CREATE VIEW attribution.failure_recurrence AS
SELECT * FROM (
    SELECT j.cluster,
           j.job_id,
           j.user_name,
           split_part(j.job_id, '_', 1)                                        AS workload,
           j.start_time                                                         AS job_start,
           j.end_time                                                           AS job_end,
           v.outcome,
           v.root_kind,
           v.root_code,
           v.root_node,
           row_number() OVER w                                                  AS failure_number,
           first_value(j.job_id) OVER w                                         AS first_job_id,
           j.id                                                                 AS job_ref
    FROM attribution.jobs j
    JOIN attribution.verdicts v ON v.job_id = j.job_id AND v.id = j.current_verdict_id
    WHERE v.outcome <> 'none' AND v.root_kind IS NOT NULL
    WINDOW w AS (PARTITION BY j.cluster, j.user_name, split_part(j.job_id, '_', 1), v.outcome, v.root_kind,
                              coalesce(v.root_code, -1)
                 ORDER BY j.start_time, j.id)
) x
WHERE failure_number >= 2;
