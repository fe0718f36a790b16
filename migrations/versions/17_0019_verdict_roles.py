"""The roles of a job's events live on its verdict: `verdicts.cause_event_ids`, `symptom_event_ids` and
`symptom_explained_by` (the causes root first, as the verdict lists them; the root is also `root_event_id`), instead of `job_events.role_in_job` (rewritten
on every link of the job at every verdict: the bimodal 25-315 ms UPDATE of issue 16) and the `verdict_symptoms`
table (one row per symptom per verdict). Neither was read by any view or command; an event's role in a job is
now its current verdict's (docs/store.md "Roles of a job's events").

`job_events` loses its foreign key to `jobs` (checked for every link of every ingest: ~20 ms of server CPU per
2,000 links); a job's links are deleted with the job by retention (store/retention.prune), as `event_jobs`' are.

Backfill: every verdict's symptoms from verdict_symptoms; the causes of each job's current verdict from its links'
roles (role_in_job said the current verdict's roles only, so an older verdict's causes were never stored: NULL).
The downgrade puts verdict_symptoms and role_in_job (from the current verdicts) back, with 0002/0006's grants.

No view reads these columns, so no view is recreated and no frozen SQL copy is needed.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

S = "attribution"
WRITER = "attribution_writer"

#: The role of each link in its job's current verdict, as role_in_job said it (and the fleet SQL says it now).
ROLE = """CASE WHEN je.event_id = v.root_event_id THEN 'root_cause'
               WHEN je.event_id = ANY (v.cause_event_ids) THEN 'cause'
               WHEN je.event_id = ANY (v.symptom_event_ids) THEN 'symptom' ELSE 'unattributed' END"""


def _if_writer(sql: str) -> str:
    return f"DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{WRITER}') THEN {sql} END IF; END $$"


def upgrade() -> None:
    op.execute(f"""
ALTER TABLE {S}.verdicts ADD COLUMN cause_event_ids bigint[],
  ADD COLUMN symptom_event_ids bigint[] NOT NULL DEFAULT '{{}}',
  ADD COLUMN symptom_explained_by text[] NOT NULL DEFAULT '{{}}';
UPDATE {S}.verdicts v SET symptom_event_ids = s.ids, symptom_explained_by = s.bys
  FROM (SELECT job_id, verdict_id, array_agg(event_id ORDER BY event_id) AS ids,
               array_agg(explained_by ORDER BY event_id) AS bys
        FROM {S}.verdict_symptoms GROUP BY job_id, verdict_id) s
  WHERE v.job_id = s.job_id AND v.id = s.verdict_id;
UPDATE {S}.verdicts v SET cause_event_ids = coalesce((
    SELECT array_agg(je.event_id ORDER BY je.event_id) FROM {S}.job_events je
    WHERE je.job_id = j.job_id AND je.job_ref = j.id AND je.role_in_job IN ('cause', 'root_cause')), '{{}}')
  FROM {S}.jobs j WHERE j.job_id = v.job_id AND j.current_verdict_id = v.id;
DROP TABLE {S}.verdict_symptoms;
ALTER TABLE {S}.job_events DROP COLUMN role_in_job,
  DROP CONSTRAINT fk_job_events_job_id_job_ref_jobs;""")


def downgrade() -> None:
    op.execute(f"""
CREATE TABLE {S}.verdict_symptoms (
  job_id text NOT NULL, verdict_id bigint NOT NULL, event_id bigint NOT NULL, explained_by text,
  CONSTRAINT pk_verdict_symptoms PRIMARY KEY (job_id, verdict_id, event_id),
  CONSTRAINT fk_verdict_symptoms_job_id_verdict_id_verdicts FOREIGN KEY (job_id, verdict_id)
    REFERENCES {S}.verdicts (job_id, id) ON DELETE CASCADE);
INSERT INTO {S}.verdict_symptoms (job_id, verdict_id, event_id, explained_by)
  SELECT DISTINCT ON (v.job_id, v.id, s.event_id) v.job_id, v.id, s.event_id, s.explained_by
  FROM {S}.verdicts v, unnest(v.symptom_event_ids, v.symptom_explained_by) AS s(event_id, explained_by)
  ORDER BY v.job_id, v.id, s.event_id;
DELETE FROM {S}.job_events je WHERE NOT EXISTS (
  SELECT 1 FROM {S}.jobs j WHERE j.job_id = je.job_id AND j.id = je.job_ref);
ALTER TABLE {S}.job_events ADD COLUMN role_in_job text NOT NULL DEFAULT 'unattributed',
  ADD CONSTRAINT fk_job_events_job_id_job_ref_jobs FOREIGN KEY (job_id, job_ref) REFERENCES {S}.jobs (job_id, id)
    ON DELETE CASCADE;
UPDATE {S}.job_events je SET role_in_job = {ROLE}
  FROM {S}.jobs j JOIN {S}.verdicts v ON v.job_id = j.job_id AND v.id = j.current_verdict_id
  WHERE j.job_id = je.job_id AND j.id = je.job_ref AND {ROLE} <> 'unattributed';
ALTER TABLE {S}.verdicts DROP COLUMN cause_event_ids, DROP COLUMN symptom_event_ids,
  DROP COLUMN symptom_explained_by;""")
    op.execute(_if_writer(f"GRANT SELECT, INSERT ON {S}.verdict_symptoms TO {WRITER}; "
                          f"GRANT UPDATE (role_in_job) ON {S}.job_events TO {WRITER};"))
