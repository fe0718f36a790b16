"""History as a laboratory (docs/replay.md). The evidence kept for replay: job_evidence, one zlib-compressed JSON
document per job (the lines a rule's prefilter flagged and the error-looking lines, with their locations; the
parsed telemetry snapshots), keyed by (job_id, job_ref), deleted with its job. The drain plan at any time:
drain_candidates_at(as_of, policy_version), which the drain_candidates view calls with now(). What each failed job
lost: the lost_gpu_hours view; workloads failing again on the same cause: failure_recurrence.

Revision ID: 0010
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from pathlib import Path

from alembic import op

revision = "0010"
down_revision = "0006"
branch_labels = None
depends_on = None

SQL = Path(__file__).resolve().parent.parent / "sql"
VIEW_GRANT = """
        DO $$ BEGIN
          IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'attribution_reader') THEN
            GRANT SELECT ON attribution.drain_candidates TO attribution_reader;
            IF to_regclass('attribution.lost_gpu_hours') IS NOT NULL THEN
              GRANT SELECT ON attribution.lost_gpu_hours, attribution.failure_recurrence TO attribution_reader;
            END IF;
          END IF;
        END $$"""
FUNCTION_GRANT = """
        DO $$ BEGIN
          IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'attribution_reader') THEN
            GRANT EXECUTE ON FUNCTION attribution.drain_candidates_at(timestamptz, text) TO attribution_reader;
          END IF;
          IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'attribution_writer') THEN
            GRANT EXECUTE ON FUNCTION attribution.drain_candidates_at(timestamptz, text) TO attribution_writer;
          END IF;
        END $$"""


def upgrade() -> None:
    op.create_table(
        "job_evidence",
        sa.Column("job_id", sa.Text(), nullable=False),
        sa.Column("job_ref", sa.BigInteger(), nullable=False),
        sa.Column("stored_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("format", sa.SmallInteger(), nullable=False),
        sa.Column("lines", sa.Integer(), nullable=False),
        sa.Column("raw_bytes", sa.Integer(), nullable=False),
        sa.Column("truncated", sa.Boolean(), nullable=False),
        sa.Column("document", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("job_id", "job_ref", name="pk_job_evidence"),
        schema="attribution",
    )
    # A per-job table: keyed by job_id first (on Citus, distributed by job_id beside jobs). Its key to jobs follows
    # jobs' own: (job_id, id) where the distributable schema (0007) made that the primary key, else id.
    op.execute("""
        DO $$ BEGIN
          IF (SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_constraint c
              JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
              WHERE c.conrelid = 'attribution.jobs'::regclass AND c.contype = 'p') = ARRAY['id', 'job_id'] THEN
            ALTER TABLE attribution.job_evidence ADD CONSTRAINT fk_job_evidence_job_id_job_ref_jobs
              FOREIGN KEY (job_id, job_ref) REFERENCES attribution.jobs (job_id, id) ON DELETE CASCADE;
          ELSE
            ALTER TABLE attribution.job_evidence ADD CONSTRAINT fk_job_evidence_job_ref_jobs
              FOREIGN KEY (job_ref) REFERENCES attribution.jobs (id) ON DELETE CASCADE;
          END IF;
        END $$""")
    op.execute("""
        DO $$ BEGIN
          IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'attribution_writer') THEN
            GRANT SELECT, INSERT, UPDATE ON attribution.job_evidence TO attribution_writer;
          END IF;
        END $$""")
    op.execute("DROP VIEW attribution.drain_candidates")
    op.execute((SQL / "0010" / "50_drain_candidates.sql").read_text())
    op.execute((SQL / "0010" / "60_lost_gpu_hours.sql").read_text())
    op.execute((SQL / "0010" / "70_failure_recurrence.sql").read_text())
    op.execute("REVOKE ALL ON FUNCTION attribution.drain_candidates_at(timestamptz, text) FROM PUBLIC")
    op.execute(FUNCTION_GRANT)
    op.execute(VIEW_GRANT)


def downgrade() -> None:
    op.execute("DROP VIEW attribution.failure_recurrence")
    op.execute("DROP VIEW attribution.lost_gpu_hours")
    op.execute("DROP VIEW attribution.drain_candidates")
    op.execute("DROP FUNCTION attribution.drain_candidates_at(timestamptz, text)")
    op.execute((SQL / "0006" / "50_drain_candidates.sql").read_text())
    op.execute(VIEW_GRANT)
    op.drop_table("job_evidence", schema="attribution")
