"""jobs.context_rank becomes jobs.context_precedence: which source of a job's context wins (the controller and
bundles over sacct and Kueue over a node). `rank` is the MPI rank of an event (events.rank) and nothing else.

No view reads the column, so no view is recreated and no frozen SQL copy is needed.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

S = "attribution"


def upgrade() -> None:
    op.alter_column("jobs", "context_rank", new_column_name="context_precedence", schema=S)


def downgrade() -> None:
    op.alter_column("jobs", "context_precedence", new_column_name="context_rank", schema=S)
