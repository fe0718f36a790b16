"""device_counters: the counters each device showed in a job's prolog and epilog snapshots, and the view
gpu_counters_latest (each GPU's newest epilog values) for the fleet views.

Revision ID: 0008
Revises: 0011
Create Date: 2026-12-01
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0008"
down_revision = "0011"
branch_labels = None
depends_on = None

S = "attribution"
TS = sa.DateTime(timezone=True)
SQL = Path(__file__).resolve().parent.parent / "sql" / "0008"


def upgrade() -> None:
    op.create_table(
        "device_counters",
        sa.Column("job_ref", sa.BigInteger(), nullable=False),
        sa.Column("cluster", sa.Text(), nullable=False),
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("device_kind", sa.Text(), nullable=False),
        sa.Column("device", sa.Text(), nullable=False),
        sa.Column("phase", sa.Text(), nullable=False),
        sa.Column("taken_at", TS, nullable=True),
        sa.Column("counters", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"),
                  nullable=False),
        sa.Column("info", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"),
                  nullable=False),
        sa.Column("stored_at", TS, server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(["job_ref"], [f"{S}.jobs.id"], name="fk_device_counters_job_ref_jobs",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_ref", "node", "device_kind", "device", "phase", name="pk_device_counters"),
        schema=S,
    )
    op.create_index("ix_device_counters_cluster_node_device_kind_device_taken_at", "device_counters",
                    ["cluster", "node", "device_kind", "device", "taken_at"], schema=S)
    op.execute((SQL / "60_gpu_counters_latest.sql").read_text())
    op.execute(f"""
        DO $$ BEGIN
          IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'attribution_reader') THEN
            GRANT SELECT ON {S}.gpu_counters_latest TO attribution_reader;
          END IF;
          IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'attribution_writer') THEN
            GRANT SELECT, INSERT, UPDATE ON {S}.device_counters TO attribution_writer;
          END IF;
        END $$""")


def downgrade() -> None:
    op.execute(f"DROP VIEW {S}.gpu_counters_latest")
    op.drop_index("ix_device_counters_cluster_node_device_kind_device_taken_at", table_name="device_counters",
                  schema=S)
    op.drop_table("device_counters", schema=S)
