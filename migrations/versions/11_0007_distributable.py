"""Distributable: every table keyed so that Citus can shard it and one big cluster spreads over all workers.

Two co-location groups (docs/store.md, "Past one server"):
- per job, distributed by `job_id` (the Slurm job id; the (cluster, job id) of every ingest routes its statements
  to one shard): jobs, verdicts, verdict_symptoms, job_events, coverage, device_counters. Their keys and foreign
  keys gain job_id (job_evidence, 0010, has it already: its foreign key to jobs gains it); gpu_counters_latest
  reads the snapshot's own job_id instead of joining jobs; every join of jobs and verdicts is on job_id too
  (job_verdicts, lost_gpu_hours, failure_recurrence, drain_candidates_at).
- per node, distributed by the node: events (by `node_key`: the node, or for a line of a job's output without a
  node `<cluster>/<job id>`, else the cluster), event_jobs (new: the job links stored beside the event, which the
  fleet views and the drain policy count), fault_weeks, fault_series, failed_roots, drain_actions (by `node`).
- small and read everywhere (reference tables): rule_packs, drain_policies, drain_conditions, node_resumes,
  alert_cursors, alert_keys.

The link from job_events to events is no foreign key any more (the two sides are in different groups, and that
key is what made DETACH PARTITION of an events month fail): retention deletes a month's links itself
(attribution.store.retention). Readers get SELECT on the columns the views read (on Citus a view runs on the
shards as the reader, so SELECT on the views alone is refused there); verdicts.cost (the document's cost object,
a stored generated column) is what lost_gpu_hours reads, so no reader may read a verdict's document.

Revision ID: 0007
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

from pathlib import Path

from alembic import op

revision = "0007"
down_revision = "0010"
branch_labels = None
depends_on = None

S = "attribution"
SQL = Path(__file__).resolve().parent.parent / "sql"
VIEWS = ("failure_recurrence", "lost_gpu_hours", "gpu_counters_latest", "drain_candidates", "recurring_faults",
         "node_faults_weekly", "fault_events", "job_verdicts")
#: Where downgrade finds each view's previous definition (the newest folder up to this one holding it): the
#: revisions before this one are ... 0005, 0009, 0011, 0008, 0006, 0010, so folder numbers do not follow the chain.
PREVIOUS = {"gpu_counters_latest": "0008", "drain_candidates": "0010", "lost_gpu_hours": "0010",
            "failure_recurrence": "0010"}
#: drain_candidates is a view over this function (0010); the function is dropped and made with it.
DRAIN_FUNCTION = f"{S}.drain_candidates_at(timestamptz, text)"
#: The tables the public views read (a reader may SELECT the columns the views read of them).
VIEW_TABLES = ("jobs", "verdicts", "events", "event_jobs", "fault_weeks", "fault_series", "failed_roots",
               "drain_policies", "drain_conditions", "node_resumes", "device_counters")


def _view(folder: str, name: str) -> str:
    for d in sorted((p for p in SQL.iterdir() if p.name <= folder), reverse=True):
        for p in sorted(d.glob("*.sql")):
            text = p.read_text()
            if f"VIEW attribution.{name} " in text:
                return text
    raise FileNotFoundError(f"{folder}: no definition of {name}")


def _if_role(role: str, sql: str) -> str:
    return (f"DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{role}') THEN {sql}; END IF; "
            f"END $$")


UPGRADE = f"""
-- per-job group: job_id in every key
ALTER TABLE {S}.job_events DROP CONSTRAINT fk_job_events_job_ref_jobs;
ALTER TABLE {S}.job_events DROP CONSTRAINT fk_job_events_event_id_event_time_events;
ALTER TABLE {S}.verdicts DROP CONSTRAINT fk_verdicts_job_ref_jobs;
ALTER TABLE {S}.coverage DROP CONSTRAINT fk_coverage_job_ref_jobs;
ALTER TABLE {S}.verdict_symptoms DROP CONSTRAINT fk_verdict_symptoms_verdict_id_verdicts;
ALTER TABLE {S}.device_counters DROP CONSTRAINT fk_device_counters_job_ref_jobs;
ALTER TABLE {S}.job_evidence DROP CONSTRAINT fk_job_evidence_job_ref_jobs;
ALTER TABLE {S}.jobs DROP CONSTRAINT pk_jobs, ADD CONSTRAINT pk_jobs PRIMARY KEY (job_id, id);

ALTER TABLE {S}.device_counters ADD COLUMN job_id text;
UPDATE {S}.device_counters d SET job_id = j.job_id FROM {S}.jobs j WHERE j.id = d.job_ref;
ALTER TABLE {S}.device_counters ALTER COLUMN job_id SET NOT NULL,
  DROP CONSTRAINT pk_device_counters,
  ADD CONSTRAINT pk_device_counters PRIMARY KEY (job_id, job_ref, node, device_kind, device, phase),
  ADD CONSTRAINT fk_device_counters_job_id_job_ref_jobs FOREIGN KEY (job_id, job_ref) REFERENCES {S}.jobs (job_id, id)
    ON DELETE CASCADE;

ALTER TABLE {S}.job_evidence ADD CONSTRAINT fk_job_evidence_job_id_job_ref_jobs FOREIGN KEY (job_id, job_ref)
  REFERENCES {S}.jobs (job_id, id) ON DELETE CASCADE;

ALTER TABLE {S}.verdicts ADD COLUMN cost jsonb GENERATED ALWAYS AS (document -> 'cost') STORED;
ALTER TABLE {S}.verdicts ADD COLUMN job_id text;
UPDATE {S}.verdicts v SET job_id = j.job_id FROM {S}.jobs j WHERE j.id = v.job_ref;
ALTER TABLE {S}.verdicts ALTER COLUMN job_id SET NOT NULL,
  DROP CONSTRAINT pk_verdicts, ADD CONSTRAINT pk_verdicts PRIMARY KEY (job_id, id),
  ADD CONSTRAINT fk_verdicts_job_id_job_ref_jobs FOREIGN KEY (job_id, job_ref) REFERENCES {S}.jobs (job_id, id)
    ON DELETE CASCADE;
DROP INDEX {S}.ix_verdicts_job_ref_id;
CREATE INDEX ix_verdicts_job_id_job_ref_id ON {S}.verdicts (job_id, job_ref, id);

ALTER TABLE {S}.verdict_symptoms ADD COLUMN job_id text;
UPDATE {S}.verdict_symptoms s SET job_id = v.job_id FROM {S}.verdicts v WHERE v.id = s.verdict_id;
ALTER TABLE {S}.verdict_symptoms ALTER COLUMN job_id SET NOT NULL,
  DROP CONSTRAINT pk_verdict_symptoms, ADD CONSTRAINT pk_verdict_symptoms PRIMARY KEY (job_id, verdict_id, event_id),
  ADD CONSTRAINT fk_verdict_symptoms_job_id_verdict_id_verdicts FOREIGN KEY (job_id, verdict_id)
    REFERENCES {S}.verdicts (job_id, id) ON DELETE CASCADE;

ALTER TABLE {S}.coverage ADD COLUMN job_id text;
UPDATE {S}.coverage c SET job_id = j.job_id FROM {S}.jobs j WHERE j.id = c.job_ref;
ALTER TABLE {S}.coverage ALTER COLUMN job_id SET NOT NULL,
  DROP CONSTRAINT pk_coverage, ADD CONSTRAINT pk_coverage PRIMARY KEY (job_id, job_ref, source, node_key, file_key),
  ADD CONSTRAINT fk_coverage_job_id_job_ref_jobs FOREIGN KEY (job_id, job_ref) REFERENCES {S}.jobs (job_id, id)
    ON DELETE CASCADE;

-- per-node group: events by node_key
ALTER TABLE {S}.events ADD COLUMN node_key text;
UPDATE {S}.events e SET node_key = coalesce(e.node,
    CASE WHEN e.source IN ('job', 'scheduler') THEN
      (SELECT j.cluster || '/' || j.job_id FROM {S}.job_events je JOIN {S}.jobs j ON j.id = je.job_ref
       WHERE je.event_id = e.id ORDER BY je.job_ref LIMIT 1) END,
    e.cluster);
ALTER TABLE {S}.events ALTER COLUMN node_key SET NOT NULL,
  DROP CONSTRAINT uq_events_fingerprint_occurred_at,
  ADD CONSTRAINT uq_events_node_key_fingerprint_occurred_at UNIQUE (node_key, fingerprint, occurred_at),
  DROP CONSTRAINT pk_events, ADD CONSTRAINT pk_events PRIMARY KEY (node_key, id, occurred_at);

ALTER TABLE {S}.job_events ADD COLUMN job_id text, ADD COLUMN node_key text;
UPDATE {S}.job_events je SET job_id = j.job_id FROM {S}.jobs j WHERE j.id = je.job_ref;
UPDATE {S}.job_events je SET node_key = e.node_key FROM {S}.events e
  WHERE e.id = je.event_id AND e.occurred_at = je.event_time;
DELETE FROM {S}.job_events WHERE node_key IS NULL OR job_id IS NULL;
ALTER TABLE {S}.job_events ALTER COLUMN job_id SET NOT NULL, ALTER COLUMN node_key SET NOT NULL,
  DROP CONSTRAINT pk_job_events, ADD CONSTRAINT pk_job_events PRIMARY KEY (job_id, job_ref, event_id),
  ADD CONSTRAINT fk_job_events_job_id_job_ref_jobs FOREIGN KEY (job_id, job_ref) REFERENCES {S}.jobs (job_id, id)
    ON DELETE CASCADE;
DROP INDEX {S}.ix_job_events_event_id;
CREATE INDEX ix_job_events_event_time ON {S}.job_events (event_time);

CREATE TABLE {S}.event_jobs (
  node_key text NOT NULL,
  event_id bigint NOT NULL,
  event_time timestamptz NOT NULL,
  job_id text NOT NULL,
  job_ref bigint NOT NULL,
  CONSTRAINT pk_event_jobs PRIMARY KEY (node_key, event_id, job_ref)
);
CREATE INDEX ix_event_jobs_event_time ON {S}.event_jobs (event_time);
INSERT INTO {S}.event_jobs (node_key, event_id, event_time, job_id, job_ref)
  SELECT node_key, event_id, event_time, job_id, job_ref FROM {S}.job_events;

ALTER TABLE {S}.drain_actions DROP CONSTRAINT pk_drain_actions,
  ADD CONSTRAINT pk_drain_actions PRIMARY KEY (node, id);
"""

DOWNGRADE = f"""
ALTER TABLE {S}.drain_actions DROP CONSTRAINT pk_drain_actions, ADD CONSTRAINT pk_drain_actions PRIMARY KEY (id);
DROP TABLE {S}.event_jobs;
DROP INDEX {S}.ix_job_events_event_time;
CREATE INDEX ix_job_events_event_id ON {S}.job_events (event_id);
ALTER TABLE {S}.job_events DROP CONSTRAINT fk_job_events_job_id_job_ref_jobs,
  DROP CONSTRAINT pk_job_events, ADD CONSTRAINT pk_job_events PRIMARY KEY (job_ref, event_id),
  DROP COLUMN job_id, DROP COLUMN node_key;
ALTER TABLE {S}.events DROP CONSTRAINT uq_events_node_key_fingerprint_occurred_at,
  ADD CONSTRAINT uq_events_fingerprint_occurred_at UNIQUE (fingerprint, occurred_at),
  DROP CONSTRAINT pk_events, ADD CONSTRAINT pk_events PRIMARY KEY (id, occurred_at),
  DROP COLUMN node_key;
ALTER TABLE {S}.coverage DROP CONSTRAINT fk_coverage_job_id_job_ref_jobs,
  DROP CONSTRAINT pk_coverage, ADD CONSTRAINT pk_coverage PRIMARY KEY (job_ref, source, node_key, file_key),
  DROP COLUMN job_id;
ALTER TABLE {S}.verdict_symptoms DROP CONSTRAINT fk_verdict_symptoms_job_id_verdict_id_verdicts,
  DROP CONSTRAINT pk_verdict_symptoms, ADD CONSTRAINT pk_verdict_symptoms PRIMARY KEY (verdict_id, event_id),
  DROP COLUMN job_id;
DROP INDEX {S}.ix_verdicts_job_id_job_ref_id;
CREATE INDEX ix_verdicts_job_ref_id ON {S}.verdicts (job_ref, id);
ALTER TABLE {S}.verdicts DROP CONSTRAINT fk_verdicts_job_id_job_ref_jobs,
  DROP CONSTRAINT pk_verdicts, ADD CONSTRAINT pk_verdicts PRIMARY KEY (id), DROP COLUMN job_id;
ALTER TABLE {S}.device_counters DROP CONSTRAINT fk_device_counters_job_id_job_ref_jobs,
  DROP CONSTRAINT pk_device_counters,
  ADD CONSTRAINT pk_device_counters PRIMARY KEY (job_ref, node, device_kind, device, phase), DROP COLUMN job_id;
ALTER TABLE {S}.job_evidence DROP CONSTRAINT fk_job_evidence_job_id_job_ref_jobs;
ALTER TABLE {S}.verdicts DROP COLUMN cost;
ALTER TABLE {S}.jobs DROP CONSTRAINT pk_jobs, ADD CONSTRAINT pk_jobs PRIMARY KEY (id);
ALTER TABLE {S}.job_evidence ADD CONSTRAINT fk_job_evidence_job_ref_jobs FOREIGN KEY (job_ref)
  REFERENCES {S}.jobs (id) ON DELETE CASCADE;
ALTER TABLE {S}.device_counters ADD CONSTRAINT fk_device_counters_job_ref_jobs FOREIGN KEY (job_ref)
  REFERENCES {S}.jobs (id) ON DELETE CASCADE;
ALTER TABLE {S}.verdict_symptoms ADD CONSTRAINT fk_verdict_symptoms_verdict_id_verdicts FOREIGN KEY (verdict_id)
  REFERENCES {S}.verdicts (id) ON DELETE CASCADE;
ALTER TABLE {S}.coverage ADD CONSTRAINT fk_coverage_job_ref_jobs FOREIGN KEY (job_ref)
  REFERENCES {S}.jobs (id) ON DELETE CASCADE;
ALTER TABLE {S}.verdicts ADD CONSTRAINT fk_verdicts_job_ref_jobs FOREIGN KEY (job_ref)
  REFERENCES {S}.jobs (id) ON DELETE CASCADE;
ALTER TABLE {S}.job_events ADD CONSTRAINT fk_job_events_event_id_event_time_events FOREIGN KEY (event_id, event_time)
  REFERENCES {S}.events (id, occurred_at) ON DELETE CASCADE;
ALTER TABLE {S}.job_events ADD CONSTRAINT fk_job_events_job_ref_jobs FOREIGN KEY (job_ref)
  REFERENCES {S}.jobs (id) ON DELETE CASCADE;
"""


#: Readers may SELECT exactly the columns the views read (found in the catalog: the views' dependencies), so that
#: on Citus, where a view's shard queries run as the reader, the views work; nothing else (not a job's stored
#: context, not a verdict's document, not a line's fields).
GRANT_VIEW_COLUMNS = f"""
DO $$
DECLARE r record;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'attribution_reader') THEN
    RETURN;
  END IF;
  FOR r IN
    SELECT t.relname AS tbl, string_agg(DISTINCT quote_ident(a.attname), ', ') AS cols
    FROM pg_depend d
    JOIN pg_rewrite w ON w.oid = d.objid
    JOIN pg_class v ON v.oid = w.ev_class AND v.relkind = 'v'
    JOIN pg_namespace vn ON vn.oid = v.relnamespace AND vn.nspname = '{S}'
    JOIN pg_class t ON t.oid = d.refobjid AND t.relkind IN ('r', 'p')
    JOIN pg_namespace tn ON tn.oid = t.relnamespace AND tn.nspname = '{S}'
    JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = d.refobjsubid
    WHERE d.classid = 'pg_rewrite'::regclass AND d.refobjsubid > 0
    GROUP BY t.relname
  LOOP
    EXECUTE format('GRANT SELECT (%s) ON {S}.%I TO attribution_reader', r.cols, r.tbl);
  END LOOP;
END $$
"""


def _grants(upgrade: bool) -> None:
    if upgrade:
        op.execute(_if_role("attribution_writer",
                            f"GRANT SELECT, INSERT ON {S}.event_jobs TO attribution_writer"))
        op.execute(GRANT_VIEW_COLUMNS)
    else:
        tables = ", ".join(f"{S}.{t}" for t in VIEW_TABLES if t != "event_jobs")
        op.execute(_if_role("attribution_reader", f"REVOKE SELECT ON {tables} FROM attribution_reader"))
    views = ", ".join(f"{S}.{v}" for v in VIEWS)
    op.execute(_if_role("attribution_reader", f"GRANT SELECT ON {views} TO attribution_reader"))
    # the drain plan at any time (0010's grants, for the function made again)
    op.execute(f"REVOKE ALL ON FUNCTION {DRAIN_FUNCTION} FROM PUBLIC")
    for role in ("attribution_reader", "attribution_writer"):
        op.execute(_if_role(role, f"GRANT EXECUTE ON FUNCTION {DRAIN_FUNCTION} TO {role}"))


def _drop_views() -> None:
    for name in VIEWS:
        op.execute(f"DROP VIEW {S}.{name}")
    op.execute(f"DROP FUNCTION {DRAIN_FUNCTION}")


def upgrade() -> None:
    _drop_views()
    op.execute(UPGRADE)
    for name in reversed(VIEWS):
        op.execute(_view("0007", name))
    _grants(True)


def downgrade() -> None:
    _drop_views()
    op.execute(DOWNGRADE)
    for name in reversed(VIEWS):
        op.execute(_view(PREVIOUS.get(name, "0006"), name))
    _grants(False)
