"""Least privilege: NOLOGIN group roles for the hooks (attribution_writer) and for readers (attribution_reader).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

attribution_writer: what `pipeline.ingest` needs and nothing else: SELECT, INSERT, UPDATE on the ingest tables
(no DELETE, no TRUNCATE, no DDL), USAGE on the schema and its sequences, EXECUTE on ensure_event_partition.
Rows reach the monthly partitions of `events` through the parent table, whose privileges are the only ones checked;
the partitions themselves are created by ensure_event_partition, which therefore runs as its owner (SECURITY
DEFINER, with a fixed search_path) so that writers need no CREATE on the schema.

attribution_reader: USAGE on the schema and SELECT on the views, nothing on the tables (the views run with their
owner's rights).

Roles belong to the whole server, not to one database: they are created only when missing, and a migration of
another database on the same server that creates them at the same moment is not an error. A migration that adds
a view must GRANT SELECT on it TO attribution_reader; one that adds a table the hooks write must grant it to
attribution_writer (docs/security.md). The downgrade revokes everything granted here and drops a role only when
no other database uses it and no login role is a member of it.
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

S = "attribution"
WRITER = "attribution_writer"
READER = "attribution_reader"
#: The tables `attribution ingest` / `attribution epilog` read and write (attribution/store/writer.py).
INGEST_TABLES = ("jobs", "events", "job_events", "verdicts", "verdict_symptoms", "coverage", "fault_weeks",
                 "rule_packs")
PARTITION_FUNCTION = f"{S}.ensure_event_partition(timestamptz)"

CREATE_ROLES = f"""
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['{WRITER}', '{READER}'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles
                           WHERE rolname = current_user AND (rolcreaterole OR rolsuper)) THEN
                RAISE EXCEPTION 'role % does not exist and % may not create roles', r, current_user
                    USING HINT = format('create it once per server (CREATE ROLE %I NOLOGIN) or run the migration '
                                        'as a role with CREATEROLE', r);
            END IF;
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;  -- a migration of another database on this server created it at the same moment
            END;
        END IF;
    END LOOP;
END $$;
"""

GRANT_VIEWS = f"""
DO $$
DECLARE
    v record;
BEGIN
    FOR v IN SELECT viewname FROM pg_catalog.pg_views WHERE schemaname = '{S}' LOOP
        EXECUTE format('GRANT SELECT ON {S}.%I TO {READER}', v.viewname);
    END LOOP;
END $$;
"""

# Drop a role only when nothing of any database depends on it and no login role is a member of it.
DROP_UNUSED_ROLES = f"""
DO $$
DECLARE
    r text;
    rid oid;
BEGIN
    FOREACH r IN ARRAY ARRAY['{WRITER}', '{READER}'] LOOP
        SELECT oid INTO rid FROM pg_catalog.pg_roles WHERE rolname = r;
        CONTINUE WHEN rid IS NULL;
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_shdepend WHERE refobjid = rid)
           OR EXISTS (SELECT 1 FROM pg_catalog.pg_auth_members WHERE roleid = rid) THEN
            RAISE NOTICE 'role % kept: another database or a login role still uses it', r;
            CONTINUE;
        END IF;
        BEGIN
            EXECUTE format('DROP ROLE %I', r);
        EXCEPTION WHEN dependent_objects_still_exist OR undefined_object OR insufficient_privilege THEN
            RAISE NOTICE 'role % kept: %', r, SQLERRM;
        END;
    END LOOP;
END $$;
"""


def upgrade() -> None:
    op.execute(CREATE_ROLES)
    op.execute(f"GRANT USAGE ON SCHEMA {S} TO {WRITER}, {READER}")
    tables = ", ".join(f"{S}.{t}" for t in INGEST_TABLES)
    op.execute(f"GRANT SELECT, INSERT, UPDATE ON {tables} TO {WRITER}")
    op.execute(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {S} TO {WRITER}")
    # Writers create monthly partitions through this function only; it runs as its owner with a search_path
    # no one else can put objects in (pg_temp last, so a temporary object cannot shadow a catalog one).
    op.execute(f"ALTER FUNCTION {PARTITION_FUNCTION} SECURITY DEFINER SET search_path = pg_catalog, pg_temp")
    op.execute(f"REVOKE ALL ON FUNCTION {PARTITION_FUNCTION} FROM PUBLIC")
    op.execute(f"GRANT EXECUTE ON FUNCTION {PARTITION_FUNCTION} TO {WRITER}")
    op.execute(GRANT_VIEWS)


def downgrade() -> None:
    op.execute(f"""
        DO $$ BEGIN
          IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = '{WRITER}') THEN
            REVOKE ALL ON ALL TABLES IN SCHEMA {S} FROM {WRITER};
            REVOKE ALL ON ALL SEQUENCES IN SCHEMA {S} FROM {WRITER};
            REVOKE ALL ON FUNCTION {PARTITION_FUNCTION} FROM {WRITER};
            REVOKE ALL ON SCHEMA {S} FROM {WRITER};
          END IF;
          IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = '{READER}') THEN
            REVOKE ALL ON ALL TABLES IN SCHEMA {S} FROM {READER};
            REVOKE ALL ON SCHEMA {S} FROM {READER};
          END IF;
        END $$""")
    op.execute(f"ALTER FUNCTION {PARTITION_FUNCTION} SECURITY INVOKER RESET search_path")
    op.execute(f"GRANT EXECUTE ON FUNCTION {PARTITION_FUNCTION} TO PUBLIC")
    op.execute(DROP_UNUSED_ROLES)
