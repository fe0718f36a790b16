"""Alerting state: a cursor per stream (verdicts, drain actions) that `attribution alerts send` has read up to,
and when each alert key was last sent (its cooldown).

Revision ID: 0011
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0009"
branch_labels = None
depends_on = None

S = "attribution"


def upgrade() -> None:
    op.create_table("alert_cursors",
                    sa.Column("stream", sa.Text(), primary_key=True),
                    sa.Column("last_id", sa.BigInteger(), nullable=False),
                    schema=S)
    op.create_table("alert_keys",
                    sa.Column("key", sa.Text(), primary_key=True),
                    sa.Column("sent_at", sa.DateTime(timezone=True), nullable=False),
                    schema=S)


def downgrade() -> None:
    op.drop_table("alert_keys", schema=S)
    op.drop_table("alert_cursors", schema=S)
