"""The lines kept for replay, one row per reporter (docs/replay.md): job_evidence_pieces. A node's report used to
read the job's whole kept evidence, merge its piece in and write it all back, so a job of 512 nodes cost its
last reports ~200 ms each at the service (bench 5b); now a report writes its own piece, and the job's document
is the union made when it is read (rules diff, reattribute, rules suggest). Per-job table: keyed by job_id first,
with jobs' key, deleted with its job.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

S = "attribution"


def upgrade() -> None:
    op.create_table(
        "job_evidence_pieces",
        sa.Column("job_id", sa.Text(), nullable=False),
        sa.Column("job_ref", sa.BigInteger(), nullable=False),
        sa.Column("piece", sa.Text(), nullable=False),  # the reporter: node/<node>, controller/controller, ...
        sa.Column("stored_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("lines", sa.Integer(), nullable=False),
        sa.Column("line_bytes", sa.Integer(), nullable=False),  # the lines' JSON strings: the per-job bound's measure
        sa.Column("telemetry_bytes", sa.Integer(), nullable=False),
        sa.Column("raw_bytes", sa.Integer(), nullable=False),
        sa.Column("truncated", sa.Boolean(), nullable=False),
        sa.Column("document", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("job_id", "job_ref", "piece", name="pk_job_evidence_pieces"),
        sa.ForeignKeyConstraint(["job_id", "job_ref"], [f"{S}.jobs.job_id", f"{S}.jobs.id"], ondelete="CASCADE",
                                name="fk_job_evidence_pieces_job_id_job_ref_jobs"),
        schema=S,
    )
    op.execute(f"""
        DO $$ BEGIN
          IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'attribution_writer') THEN
            GRANT SELECT, INSERT, UPDATE ON {S}.job_evidence_pieces TO attribution_writer;
          END IF;
        END $$""")


def downgrade() -> None:
    op.drop_table("job_evidence_pieces", schema=S)
