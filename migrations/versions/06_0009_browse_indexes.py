"""Indexes for browsing jobs (the dashboard and GET /v1/jobs): newest first overall, per cluster and per user,
and "jobs that ran on this node" (a GIN index on jobs.nodes).

The job list orders by the job's time (its end, or its start while it has none) and then id, and pages by keyset
on that pair, so each page walks one of these indexes and stops after the page size, whatever the table's size.

Revision ID: 0009
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0005"
branch_labels = None
depends_on = None

JOB_TIME = sa.text("coalesce(end_time, start_time)")


def upgrade() -> None:
    op.create_index("ix_jobs_job_time", "jobs", [JOB_TIME, "id"], schema="attribution")
    op.create_index("ix_jobs_cluster_job_time", "jobs", ["cluster", JOB_TIME, "id"], schema="attribution")
    op.create_index("ix_jobs_user_job_time", "jobs", ["user_name", JOB_TIME, "id"], schema="attribution")
    op.create_index("ix_jobs_nodes", "jobs", ["nodes"], schema="attribution", postgresql_using="gin")


def downgrade() -> None:
    for name in ("ix_jobs_nodes", "ix_jobs_user_job_time", "ix_jobs_cluster_job_time", "ix_jobs_job_time"):
        op.drop_index(name, table_name="jobs", schema="attribution")
