"""The job's name (Slurm JobName, context.yaml job_name, a Kueue workload's owner): jobs.job_name, and the
failure_recurrence view groups a user's resubmissions under new job ids by it (docs/replay.md "Recurrence").
Job names are user-written: they group only one known user's jobs, and no drain decision reads them.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

S = "attribution"
SQL = Path(__file__).resolve().parent.parent / "sql"


def _if_role(role: str, sql: str) -> str:
    return (f"DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{role}') THEN {sql}; END IF; "
            f"END $$")


def upgrade() -> None:
    op.add_column("jobs", sa.Column("job_name", sa.Text(), nullable=True), schema=S)
    op.execute(f"DROP VIEW {S}.failure_recurrence")
    op.execute((SQL / revision / "70_failure_recurrence.sql").read_text())
    # readers: the view, and the column it reads (0007: exactly the columns the views read)
    op.execute(_if_role("attribution_reader", f"GRANT SELECT ON {S}.failure_recurrence TO attribution_reader"))
    op.execute(_if_role("attribution_reader", f"GRANT SELECT (job_name) ON {S}.jobs TO attribution_reader"))


def downgrade() -> None:
    op.execute(f"DROP VIEW {S}.failure_recurrence")
    op.execute((SQL / "0007" / "70_failure_recurrence.sql").read_text())
    op.execute(_if_role("attribution_reader", f"GRANT SELECT ON {S}.failure_recurrence TO attribution_reader"))
    op.drop_column("jobs", "job_name", schema=S)
