-- One row per distinct fault event (a kernel line seen by two overlapping jobs is one row with jobs = 2).
-- occurred_at is the event's own time; for a line without a timestamp (time_exact = false) it is the end of
-- the job that reported it.
CREATE VIEW attribution.fault_events AS
SELECT e.cluster,
       e.node,
       e.gpu,
       e.kind,
       e.code,
       e.role,
       e.source,
       e.occurred_at,
       e.time_exact,
       e.message,
       l.jobs,
       e.severity,
       e.outcome,
       e.action,
       e.rule,
       e.line,
       e.handled_at,
       e.id AS event_id,
       e.node_key
FROM attribution.events e
-- the event's job links are stored beside it (event_jobs, co-located with events by node_key)
LEFT JOIN LATERAL (SELECT count(*) AS jobs FROM attribution.event_jobs ej
                   WHERE ej.node_key = e.node_key AND ej.event_id = e.id) l ON true;
