-- Each GPU's counters as the newest epilog snapshot stored for it showed them (absolute values: the fleet's
-- remapped-row and uncorrectable-ECC totals, pending remaps, reset requests). A row is stored for every GPU of a
-- node whose epilog reported (a failed job, or a counter that changed), so the latest one is current.
-- The job id is the snapshot's own (0007: device_counters carries job_id, its distribution column): no join.
CREATE VIEW attribution.gpu_counters_latest AS
SELECT DISTINCT ON (d.cluster, d.node, d.device)
       d.cluster,
       d.node,
       d.device                                                         AS gpu,
       d.info ->> 'uuid'                                                AS uuid,
       d.info ->> 'serial'                                              AS serial,
       d.info ->> 'product'                                             AS product,
       d.info ->> 'driver'                                              AS driver,
       d.taken_at,
       d.job_id                                                         AS last_job_id,
       (d.counters ->> 'remapped_rows.uncorrectable')::double precision AS remapped_rows_uncorrectable,
       (d.counters ->> 'remapped_rows.correctable')::double precision   AS remapped_rows_correctable,
       (d.counters ->> 'remapped_rows.pending')::double precision > 0   AS remap_pending,
       (d.counters ->> 'remapped_rows.failure')::double precision > 0   AS remap_failure,
       coalesce((d.counters ->> 'ecc.aggregate.dram_uncorrectable')::double precision, 0)
         + coalesce((d.counters ->> 'ecc.aggregate.sram_uncorrectable')::double precision, 0)
                                                                        AS ecc_aggregate_uncorrectable,
       (d.counters ->> 'ecc.aggregate.dram_correctable')::double precision AS ecc_aggregate_dram_correctable,
       (d.counters ->> 'retired_pages.double_bit')::double precision    AS retired_pages_dbe,
       (d.counters ->> 'retired_pages.pending')::double precision > 0   AS retirement_pending,
       (d.counters ->> 'pcie.replay_counter')::double precision         AS pcie_replays,
       (d.counters ->> 'reset.required')::double precision > 0          AS reset_required,
       d.counters
FROM attribution.device_counters d
WHERE d.device_kind = 'gpu' AND d.phase = 'epilog'
ORDER BY d.cluster, d.node, d.device, d.taken_at DESC NULLS LAST, d.stored_at DESC;
