"""Trust boundaries: who wrote the evidence, partitions made ahead of ingest, column-level grants.

Revision ID: 0006
Revises: 0008 (issued as 0005; chained after main's head 0008 so the branch has one head; the coordinator re-chains)
Create Date: 2026-12-01

- `events.evidence`: 'system' or 'job_output' (docs/bundle.md "Trust"), backfilled from `source`;
  `verdicts.culprit_evidence`: per culprit node, in the order of `culprit_nodes`, what names it. Old verdicts are
  backfilled from their root event's source. The drain_candidates view counts only system-written evidence.
- Ingest never changes the database's shape: `attribution.ensure_event_partitions(months_ahead)` makes the
  monthly partitions of the coming year and a DEFAULT partition for every other time; it runs here, at
  `attribution db upgrade` and at `attribution db attribute-pending` (the timer). Writers no longer run
  `ensure_event_partition` (its EXECUTE is revoked from them). A month whose rows already reached the default
  partition is left there (with a notice); retention detaches month partitions with a plain
  `ALTER TABLE ... DETACH PARTITION` (CONCURRENTLY is refused while a default partition exists) and deletes old
  rows of the default partition by range (docs/store.md).
- Column-level grants (issue 18, M7): the writer cannot UPDATE events (handled_at: `drain resume`), verdicts or
  verdict_symptoms, and may UPDATE only `role_in_job` of job_events.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0006"
down_revision = "0008"
branch_labels = None
depends_on = None

S = "attribution"
WRITER = "attribution_writer"
SQL = Path(__file__).resolve().parent.parent / "sql"
MONTHS_AHEAD = 12

PARTITIONS_FUNCTION = f"""
CREATE OR REPLACE FUNCTION {S}.ensure_event_partitions(months_ahead integer DEFAULT {MONTHS_AHEAD}) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    first date := (date_trunc('month', now() AT TIME ZONE 'UTC'))::date;
    lo    date;
    part  text;
    made  integer := 0;
BEGIN
    IF months_ahead IS NULL OR months_ahead < 0 OR months_ahead > 36 THEN
        RAISE EXCEPTION 'months_ahead must be between 0 and 36, not %', months_ahead;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('attribution.partitions', 0));
    IF to_regclass('{S}.events_default') IS NULL THEN
        CREATE TABLE {S}.events_default PARTITION OF {S}.events DEFAULT;
        made := made + 1;
    END IF;
    FOR i IN 0..months_ahead LOOP
        lo := (first + make_interval(months => i))::date;
        part := format('events_p%s', to_char(lo, 'YYYYMM'));
        CONTINUE WHEN to_regclass(format('{S}.%I', part)) IS NOT NULL;
        IF EXISTS (SELECT 1 FROM {S}.events_default
                   WHERE occurred_at >= lo::timestamp AT TIME ZONE 'UTC'
                     AND occurred_at < (lo + interval '1 month')::timestamp AT TIME ZONE 'UTC') THEN
            RAISE NOTICE 'rows of % are in events_default already: that month stays there', part;
            CONTINUE;
        END IF;
        EXECUTE format('CREATE TABLE {S}.%I PARTITION OF {S}.events FOR VALUES FROM (%L) TO (%L)', part,
                       to_char(lo, 'YYYY-MM-DD') || ' 00:00:00+00',
                       to_char((lo + interval '1 month')::date, 'YYYY-MM-DD') || ' 00:00:00+00');
        made := made + 1;
    END LOOP;
    RETURN made;
END $$;
"""


def _view(name: str, folder: str) -> str:
    for d in sorted((p for p in SQL.iterdir() if p.name <= folder), reverse=True):
        for p in sorted(d.glob("*.sql")):
            text = p.read_text()
            if f"VIEW attribution.{name} " in text:
                return text
    raise FileNotFoundError(f"{folder}: no definition of {name}")


def _if_role(role: str, sql: str) -> None:
    op.execute(f"""
        DO $$ BEGIN
          IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{role}') THEN
            {sql}
          END IF;
        END $$""")


def _if_writer(sql: str) -> None:
    _if_role(WRITER, sql)


def _drain_view(folder: str) -> None:
    op.execute("DROP VIEW IF EXISTS attribution.drain_candidates")
    op.execute(_view("drain_candidates", folder))
    _if_role("attribution_reader", f"GRANT SELECT ON {S}.drain_candidates TO attribution_reader;")


def upgrade() -> None:
    op.add_column("events", sa.Column("evidence", sa.Text(), server_default=sa.text("'system'"), nullable=False),
                  schema=S)
    op.execute(f"UPDATE {S}.events SET evidence = 'job_output' WHERE source = 'job'")
    op.add_column("verdicts", sa.Column("culprit_evidence", pg.ARRAY(sa.Text()), server_default=sa.text("'{}'"),
                                        nullable=False), schema=S)
    op.execute(f"""
        UPDATE {S}.verdicts v SET culprit_evidence = (
            SELECT coalesce(array_agg(CASE WHEN e.source = 'job' THEN 'job_output' ELSE 'system' END), '{{}}')
            FROM unnest(v.culprit_nodes) n LEFT JOIN {S}.events e ON e.id = v.root_event_id)
        WHERE cardinality(v.culprit_nodes) > 0""")
    _drain_view("0006")
    op.execute(PARTITIONS_FUNCTION)
    op.execute(f"REVOKE ALL ON FUNCTION {S}.ensure_event_partitions(integer) FROM PUBLIC")
    op.execute(f"SELECT {S}.ensure_event_partitions({MONTHS_AHEAD})")
    _if_writer(f"""
            REVOKE EXECUTE ON FUNCTION {S}.ensure_event_partition(timestamptz) FROM {WRITER};
            GRANT EXECUTE ON FUNCTION {S}.ensure_event_partitions(integer) TO {WRITER};
            REVOKE UPDATE ON {S}.events, {S}.verdicts, {S}.verdict_symptoms, {S}.job_events FROM {WRITER};
            GRANT UPDATE (role_in_job) ON {S}.job_events TO {WRITER};""")


def downgrade() -> None:
    _if_writer(f"""
            REVOKE UPDATE (role_in_job) ON {S}.job_events FROM {WRITER};
            GRANT UPDATE ON {S}.events, {S}.verdicts, {S}.verdict_symptoms, {S}.job_events TO {WRITER};
            GRANT EXECUTE ON FUNCTION {S}.ensure_event_partition(timestamptz) TO {WRITER};""")
    op.execute(f"DROP FUNCTION IF EXISTS {S}.ensure_event_partitions(integer)")
    # the default partition's rows have no month partition to go to: they are dropped with it
    op.execute(f"DO $$ BEGIN IF to_regclass('{S}.events_default') IS NOT NULL THEN "
               f"DELETE FROM {S}.events_default; ALTER TABLE {S}.events DETACH PARTITION {S}.events_default; "
               f"DROP TABLE {S}.events_default; END IF; END $$")
    _drain_view("0005")
    op.drop_column("verdicts", "culprit_evidence", schema=S)
    op.drop_column("events", "evidence", schema=S)
