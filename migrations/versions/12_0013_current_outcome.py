"""The current verdict's outcome kept on its job (jobs.current_outcome), with an index for the job list filtered by
outcome, newest first.

Since 0007 jobs join verdicts on (job_id, id = current_verdict_id), the key Citus co-locates them by. A single
PostgreSQL server multiplies the two equalities' selectivities, estimates one row for the join, and so for a job
list filtered on the verdict's outcome hash-joined and sorted every job instead of walking the time index to the
page. With the outcome on the job, the filter is the job's own column and the page walks
(current_outcome, job time, id) and stops at the page size, on one server or on Citus (no join at all).
The verdict writer sets it in the statement that sets current_verdict_id (attribution.store.verdicts).

Revision ID: 0013
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0007"
branch_labels = None
depends_on = None

S = "attribution"
JOB_TIME = sa.text("coalesce(end_time, start_time)")


def upgrade() -> None:
    op.add_column("jobs", sa.Column("current_outcome", sa.Text(), nullable=True), schema=S)
    op.execute(f"UPDATE {S}.jobs j SET current_outcome = v.outcome FROM {S}.verdicts v "
               f"WHERE v.job_id = j.job_id AND v.id = j.current_verdict_id")
    op.create_index("ix_jobs_outcome_job_time", "jobs", ["current_outcome", JOB_TIME, "id"], schema=S)


def downgrade() -> None:
    op.drop_index("ix_jobs_outcome_job_time", table_name="jobs", schema=S)
    op.drop_column("jobs", "current_outcome", schema=S)
