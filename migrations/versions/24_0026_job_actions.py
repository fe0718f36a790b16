"""What attribution did to failed jobs in Slurm (#31, docs/job-actions.md): job_actions, the audit of every
AdminComment written for a job's owner and every requeue decision (applied, skipped, capped, failed), with the
cause, the nodes excluded, the policy version and who acted. A cause of a job is requeued once (a unique index
on the applied requeues), whatever the number of processes deciding at once. Kept with the job (Citus: by job_id).
The controller's epilog and the service act as the writer: it may read, add and update these rows, never delete.

Revision ID: 0026
Revises: 0025
Create Date: 2027-01-12
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

S = "attribution"
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "job_actions",
        sa.Column("job_id", sa.Text(), nullable=False),
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("at", TS, server_default=sa.text("now()"), nullable=False),
        sa.Column("cluster", sa.Text(), nullable=False),
        sa.Column("job_start", TS, nullable=True),
        sa.Column("action", sa.Text(), nullable=False),  # admin_comment | requeue
        sa.Column("decision", sa.Text(), nullable=False),  # applied | skipped | capped | failed
        sa.Column("user_name", sa.Text(), nullable=True),
        sa.Column("cause", sa.Text(), nullable=True),
        sa.Column("nodes", pg.ARRAY(sa.Text()), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("policy_version", sa.Text(), nullable=True),
        sa.Column("actor", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("job_id", "id", name="pk_job_actions"),
        schema=S,
    )
    op.create_index("ix_job_actions_cluster_at", "job_actions", ["cluster", "at"], schema=S)
    op.create_index("uq_job_actions_requeued_cause", "job_actions", ["job_id", "cluster", "cause"], unique=True,
                    schema=S, postgresql_where=sa.text("action = 'requeue' AND decision = 'applied'"))
    op.execute(f"""
        DO $$ BEGIN
          IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'attribution_writer') THEN
            GRANT SELECT, INSERT, UPDATE ON {S}.job_actions TO attribution_writer;
            GRANT USAGE, SELECT ON SEQUENCE {S}.job_actions_id_seq TO attribution_writer;
          END IF;
        END $$""")


def downgrade() -> None:
    op.drop_index("uq_job_actions_requeued_cause", table_name="job_actions", schema=S)
    op.drop_index("ix_job_actions_cluster_at", table_name="job_actions", schema=S)
    op.drop_table("job_actions", schema=S)
