"""The node inbox: node hooks hand their report over in one statement; the central drain ingests it.

`inbox_reports` holds a node report's payload as submitted (the JSON the node posts to the service or writes to
its spool), keyed by its job id and a digest of the payload (SHA-256 of its canonical jsonb text), so a spool
replay of a payload the inbox already holds is the same row. `submitted_by` is the role that connected
(`session_user`: inside the SECURITY DEFINER function `current_user` is its owner), recorded for trust.
`refused` is set by the drain on a payload it can never store (the inbox's `bad/`).

`attribution.submit_report(report text)` is the only way in: SECURITY DEFINER with a fixed search_path (as
ensure_event_partition, 0002), EXECUTE revoked from PUBLIC. The node's group role `attribution_submitter`
(NOLOGIN, created when missing as 0002 creates its roles) may execute it and nothing else: it reads no table,
not even the inbox. `attribution_writer` may execute it too (a node whose login role is in the writer's group
can switch to the inbox without a DBA), and drains: SELECT, DELETE and UPDATE (refused) on the inbox only.

On Citus the inbox is distributed by job_id, co-located with jobs: a drain's delete runs in the job's ingest
transaction on the job's shard (models.DISTRIBUTION).

Revision ID: 0018
Revises: 0016
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0018"
down_revision = "0016"
branch_labels = None
depends_on = None

S = "attribution"
WRITER = "attribution_writer"
SUBMITTER = "attribution_submitter"
FUNCTION = f"{S}.submit_report(text)"
#: a payload larger than this is refused by the function (program_limit_exceeded): the service's default body
#: limit is of the same order, and no node report comes near it (events and kept lines are bounded per report)
MAX_PAYLOAD_BYTES = 64 * 1024 * 1024

CREATE_SUBMITTER = f"""
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = '{SUBMITTER}') THEN
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles
                       WHERE rolname = current_user AND (rolcreaterole OR rolsuper)) THEN
            RAISE EXCEPTION 'role {SUBMITTER} does not exist and % may not create roles', current_user
                USING HINT = 'create it once per server (CREATE ROLE {SUBMITTER} NOLOGIN) or run the migration '
                             'as a role with CREATEROLE';
        END IF;
        BEGIN
            CREATE ROLE {SUBMITTER} NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;  -- a migration of another database on this server created it at the same moment
        END;
    END IF;
END $$;
"""

SUBMIT = f"""
CREATE FUNCTION {S}.submit_report(report text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    doc jsonb;
    n integer;
BEGIN
    IF octet_length(report) > {MAX_PAYLOAD_BYTES} THEN
        RAISE EXCEPTION 'report of % bytes; at most {MAX_PAYLOAD_BYTES} are accepted', octet_length(report)
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    doc := report::jsonb;
    IF jsonb_typeof(doc) IS DISTINCT FROM 'object' OR jsonb_typeof(doc -> 'context') IS DISTINCT FROM 'object'
       OR coalesce(doc -> 'context' ->> 'job_id', '') = '' THEN
        RAISE EXCEPTION 'not a report: a JSON object with context.job_id expected'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO {S}.inbox_reports (job_id, digest, payload, submitted_by)
    VALUES (doc -> 'context' ->> 'job_id', sha256(convert_to(doc::text, 'UTF8')), doc, session_user)
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n > 0;  -- false: the inbox already holds this payload (a spool replay)
END
$fn$;
"""

DROP_SUBMITTER = f"""
DO $$
DECLARE
    rid oid;
BEGIN
    SELECT oid INTO rid FROM pg_catalog.pg_roles WHERE rolname = '{SUBMITTER}';
    IF rid IS NULL THEN
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_shdepend WHERE refobjid = rid)
       OR EXISTS (SELECT 1 FROM pg_catalog.pg_auth_members WHERE roleid = rid) THEN
        RAISE NOTICE 'role {SUBMITTER} kept: another database or a login role still uses it';
        RETURN;
    END IF;
    BEGIN
        DROP ROLE {SUBMITTER};
    EXCEPTION WHEN dependent_objects_still_exist OR undefined_object OR insufficient_privilege THEN
        RAISE NOTICE 'role {SUBMITTER} kept: %', SQLERRM;
    END;
END $$;
"""


def upgrade() -> None:
    op.create_table(
        "inbox_reports",
        sa.Column("job_id", sa.Text(), nullable=False),
        sa.Column("digest", sa.LargeBinary(), nullable=False),
        sa.Column("payload", postgresql.JSONB(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("submitted_by", sa.Text(), nullable=False),
        sa.Column("refused", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("job_id", "digest", name="pk_inbox_reports"),
        schema=S,
    )
    op.create_index("ix_inbox_reports_received_at", "inbox_reports", ["received_at"], schema=S)
    op.execute(SUBMIT)
    op.execute(f"REVOKE ALL ON FUNCTION {FUNCTION} FROM PUBLIC")
    op.execute(CREATE_SUBMITTER)
    op.execute(f"GRANT USAGE ON SCHEMA {S} TO {SUBMITTER}")
    op.execute(f"GRANT EXECUTE ON FUNCTION {FUNCTION} TO {SUBMITTER}")
    op.execute(f"""
        DO $$ BEGIN
          IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = '{WRITER}') THEN
            GRANT EXECUTE ON FUNCTION {FUNCTION} TO {WRITER};
            GRANT SELECT, DELETE ON {S}.inbox_reports TO {WRITER};
            GRANT UPDATE (refused) ON {S}.inbox_reports TO {WRITER};
          END IF;
        END $$""")


def downgrade() -> None:
    op.execute(f"""
        DO $$ BEGIN
          IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = '{SUBMITTER}') THEN
            REVOKE ALL ON SCHEMA {S} FROM {SUBMITTER};
          END IF;
        END $$""")
    op.execute(f"DROP FUNCTION IF EXISTS {FUNCTION}")
    op.drop_index("ix_inbox_reports_received_at", table_name="inbox_reports", schema=S)
    op.drop_table("inbox_reports", schema=S)
    op.execute(DROP_SUBMITTER)
