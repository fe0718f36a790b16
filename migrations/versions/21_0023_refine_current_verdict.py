"""A job's current verdict is refined in place while its decision stays the same.

A verdict row is a decision: its outcome, confidence, action, root cause and culprits. While the reports of one job
keep arriving (512 node reports of one failed job), each re-attribution that decides the same adds only detail (more
symptoms, more coverage, a longer explanation); until now each such one was a new row (496 rows for one job). From
here a new row is written only when the decision changes, and the detail of the current row is brought up to date
through `attribution.refine_current_verdict(...)`: SECURITY DEFINER with a fixed search_path (as
ensure_event_partition, 0002), EXECUTE revoked from PUBLIC and granted to attribution_writer. It updates the
document and the roles of the job's events of the job's *current* verdict only, and only while its decision columns
are what the caller read: the writer still updates no past verdict and no decision (tests/hardening/
test_privileges.py).

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

S = "attribution"
WRITER = "attribution_writer"
SIGNATURE = f"{S}.refine_current_verdict(text, bigint, bigint, jsonb, text, text, text, bigint, bigint[], bigint[], text[])"

REFINE = f"""
CREATE FUNCTION {S}.refine_current_verdict(p_job_id text, p_job_ref bigint, p_verdict_id bigint, p_document jsonb,
                                           p_digest text, p_explanation text, p_rules_version text,
                                           p_root_event_id bigint, p_causes bigint[], p_symptoms bigint[],
                                           p_explained text[]) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    n integer;
BEGIN
    UPDATE {S}.verdicts v
       SET document = p_document, input_digest = p_digest, explanation = p_explanation,
           rules_version = p_rules_version, root_event_id = p_root_event_id, cause_event_ids = p_causes,
           symptom_event_ids = p_symptoms, symptom_explained_by = p_explained
     WHERE v.job_id = p_job_id AND v.id = p_verdict_id AND v.job_ref = p_job_ref
       AND v.id = (SELECT j.current_verdict_id FROM {S}.jobs j WHERE j.job_id = p_job_id AND j.id = p_job_ref)
       AND v.outcome = p_document ->> 'outcome' AND v.confidence = p_document ->> 'confidence'
       AND v.action = p_document ->> 'action';
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n > 0;
END
$fn$;
"""


def upgrade() -> None:
    op.execute(REFINE)
    op.execute(f"REVOKE ALL ON FUNCTION {SIGNATURE} FROM PUBLIC")
    op.execute(f"""
        DO $$ BEGIN
          IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = '{WRITER}') THEN
            GRANT EXECUTE ON FUNCTION {SIGNATURE} TO {WRITER};
          END IF;
        END $$""")


def downgrade() -> None:
    op.execute(f"DROP FUNCTION IF EXISTS {SIGNATURE}")
