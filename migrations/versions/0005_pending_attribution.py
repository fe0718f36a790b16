"""jobs.attribution_pending: evidence stored since the job's verdict was last computed.

Many reports of one job (a thousand node epilogs) store their evidence one after another, but only one process
at a time re-attributes the job; the others mark it pending and leave. The attributor clears the mark before it
reads the evidence and looks again after it commits, so the last evidence is always attributed
(attribution/pipeline.py, `ingest`).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("attribution_pending", sa.Boolean(), server_default=sa.text("false"),
                                    nullable=False), schema="attribution")
    # `attribution db attribute-pending` looks for the few pending jobs among millions
    op.create_index("ix_jobs_attribution_pending", "jobs", ["id"], schema="attribution",
                    postgresql_where=sa.text("attribution_pending"))


def downgrade() -> None:
    op.drop_index("ix_jobs_attribution_pending", table_name="jobs", schema="attribution")
    op.drop_column("jobs", "attribution_pending", schema="attribution")
