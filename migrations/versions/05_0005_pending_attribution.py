"""jobs.evidence_seq and jobs.attributed_seq: evidence stored since the job's verdict was last computed.

Many reports of one job (a thousand node epilogs) store their evidence one after another, each counting it in
evidence_seq, but only one process at a time re-attributes the job; the others leave. The attributor reads the
count before it reads the evidence, records it as attributed_seq with the verdict, and looks again after it
commits, so the last evidence is always attributed (attribution/pipeline.py, `ingest`). It locks the job's row
only for that last short update, so storing goes on while it correlates.

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
    for column in ("evidence_seq", "attributed_seq"):
        op.add_column("jobs", sa.Column(column, sa.BigInteger(), server_default=sa.text("0"), nullable=False),
                      schema="attribution")
    # `attribution db attribute-pending` looks for the few pending jobs among millions
    op.create_index("ix_jobs_attribution_pending", "jobs", ["id"], schema="attribution",
                    postgresql_where=sa.text("evidence_seq > attributed_seq"))


def downgrade() -> None:
    op.drop_index("ix_jobs_attribution_pending", table_name="jobs", schema="attribution")
    for column in ("attributed_seq", "evidence_seq"):
        op.drop_column("jobs", column, schema="attribution")
