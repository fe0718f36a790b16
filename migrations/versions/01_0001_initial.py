"""Initial schema: jobs, partitioned events, links, verdicts, coverage, the weekly rollup, the public views.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

S = "attribution"
TS = sa.DateTime(timezone=True)
SQL = Path(__file__).resolve().parent.parent / "sql" / "0001"

PARTITION_FUNCTION = """
CREATE FUNCTION attribution.ensure_event_partition(m timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    lo   date := (date_trunc('month', m AT TIME ZONE 'UTC'))::date;
    hi   date := (lo + interval '1 month')::date;
    part text := format('events_p%s', to_char(lo, 'YYYYMM'));
BEGIN
    IF to_regclass(format('attribution.%I', part)) IS NOT NULL THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('attribution.partition/' || part, 0));
    IF to_regclass(format('attribution.%I', part)) IS NULL THEN
        EXECUTE format('CREATE TABLE attribution.%I PARTITION OF attribution.events FOR VALUES FROM (%L) TO (%L)',
                       part, to_char(lo, 'YYYY-MM-DD') || ' 00:00:00+00', to_char(hi, 'YYYY-MM-DD') || ' 00:00:00+00');
    END IF;
END $$;
"""


def _views() -> list[str]:
    return [p.read_text() for p in sorted(SQL.glob("*.sql"))]


def upgrade() -> None:
    op.execute(f"CREATE SCHEMA IF NOT EXISTS {S}")
    op.create_table(
        "jobs",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("cluster", sa.Text(), nullable=False),
        sa.Column("job_id", sa.Text(), nullable=False),
        sa.Column("start_time", TS, nullable=False),
        sa.Column("end_time", TS, nullable=True),
        sa.Column("user_name", sa.Text(), nullable=True),
        sa.Column("partition", sa.Text(), nullable=True),
        sa.Column("state", sa.Text(), server_default=sa.text("'UNKNOWN'"), nullable=False),
        sa.Column("exit_code", sa.Text(), nullable=True),
        sa.Column("failed_node", sa.Text(), nullable=True),
        sa.Column("nodes", pg.ARRAY(sa.Text()), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("gpus_per_node", sa.Integer(), nullable=True),
        sa.Column("context", pg.JSONB(), server_default=sa.text("'{}'::jsonb"), nullable=False),
        sa.Column("context_source", sa.Text(), nullable=False),
        sa.Column("context_rank", sa.SmallInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("current_verdict_id", sa.BigInteger(), nullable=True),
        sa.Column("created_at", TS, server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", TS, server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
        sa.UniqueConstraint("cluster", "job_id", "start_time", name="uq_jobs_cluster_job_id_start_time"),
        schema=S,
    )
    op.create_index("ix_jobs_cluster_job_id", "jobs", ["cluster", "job_id"], schema=S)
    op.create_index("ix_jobs_end_time", "jobs", ["end_time"], schema=S)

    op.execute(f"CREATE SEQUENCE {S}.events_id_seq AS bigint")
    op.create_table(
        "events",
        sa.Column("id", sa.BigInteger(), server_default=sa.text("nextval('attribution.events_id_seq')"),
                  nullable=False),
        sa.Column("occurred_at", TS, nullable=False),
        sa.Column("fingerprint", sa.LargeBinary(), nullable=False),
        sa.Column("cluster", sa.Text(), nullable=False),
        sa.Column("node", sa.Text(), nullable=True),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("code", sa.Integer(), nullable=True),
        sa.Column("gpu", sa.Text(), nullable=True),
        sa.Column("rank", sa.Integer(), nullable=True),
        sa.Column("time_exact", sa.Boolean(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.Column("action", sa.Text(), nullable=True),
        sa.Column("severity", sa.Text(), nullable=False),
        sa.Column("rule", sa.Text(), nullable=False),
        sa.Column("location", sa.Text(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("line", sa.Text(), nullable=False),
        sa.Column("fields", pg.JSONB(), server_default=sa.text("'{}'::jsonb"), nullable=False),
        sa.Column("handled_at", TS, nullable=True),
        sa.Column("stored_at", TS, server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("id", "occurred_at", name="pk_events"),
        sa.UniqueConstraint("fingerprint", "occurred_at", name="uq_events_fingerprint_occurred_at"),
        schema=S,
        postgresql_partition_by="RANGE (occurred_at)",
    )
    op.execute(f"ALTER SEQUENCE {S}.events_id_seq OWNED BY {S}.events.id")
    op.create_index("ix_events_cluster_node_occurred_at", "events", ["cluster", "node", "occurred_at"], schema=S)
    op.create_index("ix_events_kind_occurred_at", "events", ["kind", "occurred_at"], schema=S)
    op.execute(PARTITION_FUNCTION)

    op.create_table(
        "job_events",
        sa.Column("job_ref", sa.BigInteger(), nullable=False),
        sa.Column("event_id", sa.BigInteger(), nullable=False),
        sa.Column("event_time", TS, nullable=False),
        sa.Column("role_in_job", sa.Text(), server_default=sa.text("'unattributed'"), nullable=False),
        sa.ForeignKeyConstraint(["job_ref"], [f"{S}.jobs.id"], name="fk_job_events_job_ref_jobs", ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["event_id", "event_time"], [f"{S}.events.id", f"{S}.events.occurred_at"],
                                name="fk_job_events_event_id_event_time_events", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_ref", "event_id", name="pk_job_events"),
        schema=S,
    )
    op.create_index("ix_job_events_event_id", "job_events", ["event_id"], schema=S)

    op.create_table(
        "verdicts",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("job_ref", sa.BigInteger(), nullable=False),
        sa.Column("created_at", TS, server_default=sa.text("now()"), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column("confidence", sa.Text(), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("root_event_id", sa.BigInteger(), nullable=True),
        sa.Column("root_kind", sa.Text(), nullable=True),
        sa.Column("root_code", sa.Integer(), nullable=True),
        sa.Column("root_node", sa.Text(), nullable=True),
        sa.Column("root_gpu", sa.Text(), nullable=True),
        sa.Column("root_time", TS, nullable=True),
        sa.Column("culprit_nodes", pg.ARRAY(sa.Text()), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("explanation", sa.Text(), nullable=False),
        sa.Column("rules_version", sa.Text(), nullable=False),
        sa.Column("input_digest", sa.Text(), nullable=False),
        sa.Column("document", pg.JSONB(), nullable=False),
        sa.ForeignKeyConstraint(["job_ref"], [f"{S}.jobs.id"], name="fk_verdicts_job_ref_jobs", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_verdicts"),
        schema=S,
    )
    op.create_index("ix_verdicts_job_ref_id", "verdicts", ["job_ref", "id"], schema=S)
    op.create_index("ix_verdicts_outcome_created_at", "verdicts", ["outcome", "created_at"], schema=S)

    op.create_table(
        "verdict_symptoms",
        sa.Column("verdict_id", sa.BigInteger(), nullable=False),
        sa.Column("event_id", sa.BigInteger(), nullable=False),
        sa.Column("explained_by", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["verdict_id"], [f"{S}.verdicts.id"], name="fk_verdict_symptoms_verdict_id_verdicts",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("verdict_id", "event_id", name="pk_verdict_symptoms"),
        schema=S,
    )

    op.create_table(
        "coverage",
        sa.Column("job_ref", sa.BigInteger(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("node_key", sa.Text(), nullable=False),
        sa.Column("file_key", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("lines", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("notes", pg.ARRAY(sa.Text()), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("reported_at", TS, server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(["job_ref"], [f"{S}.jobs.id"], name="fk_coverage_job_ref_jobs", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_ref", "source", "node_key", "file_key", name="pk_coverage"),
        schema=S,
    )

    op.create_table(
        "fault_weeks",
        sa.Column("cluster", sa.Text(), nullable=False),
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("gpu_key", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("code_key", sa.Integer(), nullable=False),
        sa.Column("week", sa.Date(), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("events", sa.BigInteger(), nullable=False),
        sa.Column("first_seen", TS, nullable=False),
        sa.Column("last_seen", TS, nullable=False),
        sa.PrimaryKeyConstraint("cluster", "node", "gpu_key", "kind", "code_key", "week", name="pk_fault_weeks"),
        schema=S,
    )
    op.create_index("ix_fault_weeks_week", "fault_weeks", ["week"], schema=S)

    op.create_table(
        "rule_packs",
        sa.Column("version", sa.Text(), nullable=False),
        sa.Column("first_used", TS, server_default=sa.text("now()"), nullable=False),
        sa.Column("rules", sa.Integer(), nullable=False),
        sa.Column("files", pg.JSONB(), server_default=sa.text("'{}'::jsonb"), nullable=False),
        sa.PrimaryKeyConstraint("version", name="pk_rule_packs"),
        schema=S,
    )

    for sql in _views():
        op.execute(sql)


def downgrade() -> None:
    for view in ("drain_candidates", "recurring_faults", "node_faults_weekly", "fault_events", "job_verdicts"):
        op.execute(f"DROP VIEW IF EXISTS {S}.{view}")
    for table in ("rule_packs", "fault_weeks", "coverage", "verdict_symptoms", "verdicts", "job_events"):
        op.drop_table(table, schema=S)
    op.execute(f"DROP FUNCTION IF EXISTS {S}.ensure_event_partition(timestamptz)")
    op.drop_table("events", schema=S)
    op.drop_table("jobs", schema=S)
