-- The nodes a drain policy (rules/drain-policy.yaml, loaded into drain_policies/drain_conditions by
-- `attribution drain plan|apply`) would drain at a time: one row per node, with a reason fit for Slurm's Reason field,
-- the evidence (every condition met, its events and jobs) and a score (the sum of the met conditions' scores).
-- Only infrastructure causes count, and only system-written evidence (kernel, Fabric Manager, scheduler state,
-- telemetry): an event from job output, or a culprit that only job output names, never drains a node
-- (docs/verdict.md "Evidence a user could have written"). Evidence older than a condition's window does not count.
-- The node's life (node_life: its boots, Slurm's resumes and `attribution drain resume`) decides the rest: a
-- one-shot condition counts only the evidence from after the node's last reboot or resume, a recurrence condition
-- (drain_conditions.recurrence) all of it, also events already marked handled (docs/drain.md).
-- `drain_conditions_at` is every condition's progress on every node that has evidence for it (met or not, with
-- what its last reboot or resume cleared): the node page explains a node from it (`attribution node NAME`);
-- `drain_candidates_at` the nodes whose conditions are met. The view is the plan now; `attribution drain plan
-- --as-of T` and `drain backtest` call the function with a past time (and a policy version): evidence after T does
-- not count, nor a boot or resume after T.
-- Distributable (docs/store.md): the MATERIALIZED steps each read one co-location group (a node's life, by node;
-- a node's recent causes with their job links, by node_key; the failed jobs with their verdicts, by job_id) and
-- are computed on the shards; what follows combines their few rows; no correlated subquery reads a table.

-- ISO weeks as a Slurm reason names them: 2026-W41,W42,W44 (the year again only when it changes)
CREATE FUNCTION attribution.iso_weeks(weeks date[]) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $fn$
SELECT string_agg(CASE WHEN x.prev IS NULL OR to_char(x.prev, 'IYYY') <> to_char(x.w, 'IYYY')
                       THEN to_char(x.w, 'IYYY-"W"IW') ELSE to_char(x.w, '"W"IW') END, ',' ORDER BY x.w)
FROM (SELECT u.w, lag(u.w) OVER (ORDER BY u.w) AS prev FROM (SELECT DISTINCT unnest(weeks) AS w) u) x
$fn$;

CREATE FUNCTION attribution.drain_conditions_at(as_of timestamptz, policy_version text DEFAULT NULL,
                                                only_cluster text DEFAULT NULL, only_node text DEFAULT NULL)
RETURNS TABLE (cluster text, node text, gpu text, condition_id text, recurrence boolean, unit text, label text,
               score real, reason_prefix text, min_count integer, window_days integer, counted bigint, seen bigint,
               met boolean, reset_at timestamptz, reset_what text, reset_source text, weeks date[], kind text,
               code integer, last_job_id text, last_seen timestamptz, seen_last timestamptz, event_ids bigint[],
               job_refs bigint[], job_ids text[])
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    widest int;
    earliest timestamptz;
BEGIN
-- the widest window of the policy first, so that the query below carries the earliest time it reads as a literal:
-- the planner then prunes the events' months at plan time (a bound computed in the query is pruned only when it
-- runs, after every month of the history was planned: planning grew with the length of the history)
EXECUTE format($w$
    SELECT coalesce(max(c.window_days), 0) FROM attribution.drain_conditions c
    WHERE c.policy_version = (SELECT version FROM attribution.drain_policies
                              WHERE CAST(%1$L AS text) IS NULL OR version = CAST(%1$L AS text)
                              ORDER BY loaded_at DESC, version LIMIT 1)
$w$, policy_version) INTO widest;
earliest := as_of - make_interval(days => widest);
-- the query with the time, the policy and the node as literals: Citus plans no query of a function that has
-- parameters ("could not create distributed plan", measured), and the planner prunes to the months the window covers
RETURN QUERY EXECUTE format($q$
WITH policy AS (
    SELECT version, reason_prefix FROM attribution.drain_policies
    WHERE CAST(%2$L AS text) IS NULL OR version = CAST(%2$L AS text) ORDER BY loaded_at DESC, version LIMIT 1
), cond AS (
    SELECT c.*, p.reason_prefix,
           CASE WHEN c.culprit_distinct = 'users' THEN 'users' WHEN c.culprit_distinct IS NOT NULL THEN 'failed jobs'
                ELSE c.distinct_by END AS unit
    FROM attribution.drain_conditions c JOIN policy p ON p.version = c.policy_version
), resets AS MATERIALIZED (
    -- each node's last reboot or resume up to the time; one before the widest window began precedes all evidence
    SELECT DISTINCT ON (l.node, l.cluster) l.cluster, l.node, l.at, l.what, l.source
    FROM attribution.node_life l
    WHERE l.what IN ('boot', 'resume') AND l.at <= CAST(%1$L AS timestamptz) AND l.at >= CAST(%3$L AS timestamptz)
      AND (CAST(%4$L AS text) IS NULL OR l.cluster = CAST(%4$L AS text))
      AND (CAST(%5$L AS text) IS NULL OR l.node = CAST(%5$L AS text))
    ORDER BY l.node, l.cluster, l.at DESC, l.what, l.source
), event_groups AS MATERIALIZED (
    SELECT x.cluster, x.node, x.gpu, x.condition_id,
           count(DISTINCT x.id) FILTER (WHERE x.counts) AS events,
           count(DISTINCT x.job_ref) FILTER (WHERE x.counts) AS jobs,
           count(DISTINCT x.week) FILTER (WHERE x.counts) AS weeks_n,
           count(DISTINCT x.id) AS seen_events, count(DISTINCT x.job_ref) AS seen_jobs,
           count(DISTINCT x.week) AS seen_weeks,
           (array_agg(x.code ORDER BY x.occurred_at DESC, x.id DESC) FILTER (WHERE x.counts))[1] AS code,
           (array_agg(x.kind ORDER BY x.occurred_at DESC, x.id DESC) FILTER (WHERE x.counts))[1] AS kind,
           (array_agg(x.job_id ORDER BY x.occurred_at DESC, x.id DESC)
                FILTER (WHERE x.counts AND x.job_ref IS NOT NULL))[1] AS last_job_id,
           max(x.occurred_at) FILTER (WHERE x.counts) AS last_seen, max(x.occurred_at) AS seen_last,
           coalesce(array_agg(DISTINCT x.id) FILTER (WHERE x.counts), '{}') AS event_ids,
           coalesce(array_agg(DISTINCT x.job_ref) FILTER (WHERE x.counts AND x.job_ref IS NOT NULL), '{}') AS job_refs,
           coalesce(array_agg(DISTINCT x.job_id) FILTER (WHERE x.counts AND x.job_ref IS NOT NULL), '{}') AS job_ids,
           coalesce(array_agg(DISTINCT x.week) FILTER (WHERE x.counts), '{}') AS weeks
    FROM (
        SELECT e.cluster, e.node, CASE WHEN c.per = 'gpu' THEN e.gpu END AS gpu, c.condition_id, e.id,
               e.occurred_at, e.code, e.kind, ej.job_ref, ej.job_id,
               (date_trunc('week', e.occurred_at AT TIME ZONE 'UTC'))::date AS week,
               -- a one-shot condition counts what came after the last reboot or resume (and is not marked handled)
               c.recurrence OR (e.handled_at IS NULL AND e.occurred_at > coalesce(r.at, '-infinity')) AS counts
        FROM cond c
        JOIN attribution.events e
          ON e.kind = ANY (c.kinds)
         AND e.occurred_at >= CAST(%1$L AS timestamptz) - make_interval(days => c.window_days)
         -- the widest window, as a constant for the planner: only the partitions and index range it covers are read
         AND e.occurred_at >= CAST(%3$L AS timestamptz)
         AND e.occurred_at <= CAST(%1$L AS timestamptz)
         AND e.role = 'cause' AND e.node IS NOT NULL AND e.evidence = 'system'
         AND coalesce(e.outcome, '') IN ('gpu_hardware', 'nvlink', 'nvswitch_fabric', 'network', 'host')
         AND (CAST(%4$L AS text) IS NULL OR e.cluster = CAST(%4$L AS text))
         AND (CAST(%5$L AS text) IS NULL OR e.node_key = CAST(%5$L AS text))
        LEFT JOIN resets r ON r.node = e.node_key AND r.cluster = e.cluster
        LEFT JOIN attribution.event_jobs ej ON ej.node_key = e.node_key AND ej.event_id = e.id
        WHERE c.kinds IS NOT NULL
    ) x
    GROUP BY x.cluster, x.node, x.gpu, x.condition_id
), culprits AS MATERIALIZED (
    SELECT j.cluster, n.node, c.condition_id, j.id, j.job_id, j.end_time, j.user_name,
           (date_trunc('week', j.end_time AT TIME ZONE 'UTC'))::date AS week,
           c.recurrence OR j.end_time > coalesce(r.at, '-infinity') AS counts
    FROM cond c
    JOIN attribution.jobs j ON j.end_time >= CAST(%1$L AS timestamptz) - make_interval(days => c.window_days)
     AND j.end_time <= CAST(%1$L AS timestamptz)
     AND j.end_time >= CAST(%3$L AS timestamptz)
     AND (CAST(%4$L AS text) IS NULL OR j.cluster = CAST(%4$L AS text))
    JOIN attribution.verdicts v ON v.job_id = j.job_id AND v.id = j.current_verdict_id
     -- a verdict is made when its job's evidence arrives, after the job ended (a day of slack for the clocks): the
     -- few infrastructure verdicts since the window began are found by (outcome, created_at), where the jobs
     -- that ended in it are all the fleet's jobs of that week
     AND v.created_at >= CAST(%3$L AS timestamptz) - interval '1 day'
    CROSS JOIN LATERAL unnest(v.culprit_nodes, v.culprit_evidence) AS n(node, evidence)
    LEFT JOIN resets r ON r.cluster = j.cluster AND r.node = n.node
    WHERE c.culprit_distinct IS NOT NULL AND n.evidence = 'system'
      AND v.outcome IN ('gpu_hardware', 'nvlink', 'nvswitch_fabric', 'network', 'host')
      AND (CAST(%5$L AS text) IS NULL OR n.node = CAST(%5$L AS text))
), culprit_groups AS MATERIALIZED (
    SELECT x.cluster, x.node, x.condition_id,
           count(DISTINCT x.user_name) FILTER (WHERE x.counts) AS users, count(DISTINCT x.id) FILTER (WHERE x.counts)
               AS jobs,
           count(DISTINCT x.user_name) AS seen_users, count(DISTINCT x.id) AS seen_jobs,
           (array_agg(x.job_id ORDER BY x.end_time DESC, x.id DESC) FILTER (WHERE x.counts))[1] AS last_job_id,
           max(x.end_time) FILTER (WHERE x.counts) AS last_seen, max(x.end_time) AS seen_last,
           coalesce(array_agg(DISTINCT x.id) FILTER (WHERE x.counts), '{}') AS job_refs,
           coalesce(array_agg(DISTINCT x.job_id) FILTER (WHERE x.counts), '{}') AS job_ids,
           coalesce(array_agg(DISTINCT x.week) FILTER (WHERE x.counts), '{}') AS weeks
    FROM culprits x
    GROUP BY x.cluster, x.node, x.condition_id
), progress AS (
    SELECT g.cluster, g.node, g.gpu, c.condition_id, c.recurrence, c.unit, c.label, c.score, c.reason_prefix,
           c.min_count, c.window_days,
           CASE c.distinct_by WHEN 'events' THEN g.events WHEN 'jobs' THEN least(g.jobs, g.events) ELSE g.weeks_n END
               AS counted,
           CASE c.distinct_by WHEN 'events' THEN g.seen_events WHEN 'jobs' THEN least(g.seen_jobs, g.seen_events)
                ELSE g.seen_weeks END AS seen,
           g.weeks, g.kind, g.code, g.last_job_id, g.last_seen, g.seen_last, g.event_ids, g.job_refs, g.job_ids
    FROM event_groups g JOIN cond c ON c.condition_id = g.condition_id
    UNION ALL
    SELECT g.cluster, g.node, NULL, c.condition_id, c.recurrence, c.unit, c.label, c.score, c.reason_prefix,
           c.min_count, c.window_days,
           CASE c.culprit_distinct WHEN 'users' THEN g.users ELSE g.jobs END,
           CASE c.culprit_distinct WHEN 'users' THEN g.seen_users ELSE g.seen_jobs END,
           g.weeks, NULL, NULL, g.last_job_id, g.last_seen, g.seen_last, '{}', g.job_refs, g.job_ids
    FROM culprit_groups g JOIN cond c ON c.condition_id = g.condition_id
)
SELECT p.cluster, p.node, p.gpu, p.condition_id, p.recurrence, p.unit, p.label, p.score, p.reason_prefix,
       p.min_count, p.window_days, p.counted, p.seen, p.counted >= p.min_count, r.at, r.what, r.source, p.weeks,
       p.kind, p.code, p.last_job_id, p.last_seen, p.seen_last, p.event_ids, p.job_refs, p.job_ids
FROM progress p
LEFT JOIN resets r ON r.cluster = p.cluster AND r.node = p.node
$q$, as_of, policy_version, earliest, only_cluster, only_node);
END
$fn$;

CREATE FUNCTION attribution.drain_candidates_at(as_of timestamptz, policy_version text DEFAULT NULL)
RETURNS TABLE (cluster text, node text, reason text, evidence jsonb, score real)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
RETURN QUERY EXECUTE format($q$
WITH ranked AS MATERIALIZED (
    SELECT m.*, row_number() OVER (ORDER BY m.cluster, m.node, m.condition_id, m.gpu) AS match_no,
           row_number() OVER (PARTITION BY m.cluster, m.node ORDER BY m.score DESC, m.last_seen DESC, m.condition_id)
               AS pick
    FROM attribution.drain_conditions_at(CAST(%1$L AS timestamptz), CAST(%2$L AS text)) m
    WHERE m.met
), match_jobs AS MATERIALIZED (
    -- each match's jobs, in the order they ended (found by their key, job id and id, among the few the matches
    -- name: by id alone no index applies and every job of the history was read)
    SELECT a.match_no,
           jsonb_agg(jsonb_build_object('cluster', x.cluster, 'job_id', x.job_id) ORDER BY x.end_time) AS jobs
    FROM ranked a
    CROSS JOIN LATERAL unnest(a.job_refs) AS r(job_ref)
    JOIN attribution.jobs x ON x.job_id = ANY (a.job_ids) AND x.id = r.job_ref
    GROUP BY a.match_no
), evidence AS (
    SELECT a.cluster, a.node,
           jsonb_agg(jsonb_build_object(
               'condition', a.condition_id, 'kind', a.kind, 'code', a.code, 'gpu', a.gpu,
               'events', to_jsonb(a.event_ids), 'jobs', coalesce(mj.jobs, '[]'),
               'last_seen', a.last_seen, 'recurrence', a.recurrence, 'count', a.counted, 'unit', a.unit,
               'weeks', to_jsonb(a.weeks)) ORDER BY a.score DESC, a.condition_id, a.gpu) AS evidence,
           sum(a.score)::real AS score
    FROM ranked a LEFT JOIN match_jobs mj ON mj.match_no = a.match_no
    GROUP BY a.cluster, a.node
)
SELECT r.cluster,
       r.node,
       concat_ws(' ', r.reason_prefix, replace(r.label, '{code}', coalesce(r.code::text, '')),
                 'gpu ' || r.gpu, CASE WHEN r.recurrence THEN 'weeks ' || attribution.iso_weeks(r.weeks) END,
                 'job ' || r.last_job_id)                                                  AS reason,
       ev.evidence,
       ev.score
FROM ranked r
JOIN evidence ev ON ev.cluster = r.cluster AND ev.node = r.node
WHERE r.pick = 1
$q$, as_of, policy_version);
END
$fn$;

CREATE VIEW attribution.drain_candidates AS
SELECT cluster, node, reason, evidence, score FROM attribution.drain_candidates_at(now());
