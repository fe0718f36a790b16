-- STUB until the drain policy lands (issue #5): the nodes the default drain policy would drain now.
-- Same columns as the real view; returns no rows.
CREATE VIEW attribution.drain_candidates AS
SELECT NULL::text  AS cluster,
       NULL::text  AS node,
       NULL::text  AS reason,
       NULL::jsonb AS evidence,
       NULL::real  AS score
WHERE false;
