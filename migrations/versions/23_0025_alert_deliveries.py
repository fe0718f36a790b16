"""What each alert owes each sink: one row per alert and sink, from when `attribution alerts send` decides to send
it until the sink took it (delivered_at) or the run gave up on it after the configured attempts (gave_up_at).

A sink that fails is tried again, with a wait that doubles, without sending again to the sinks that already took
the alert and without holding back the alerts after it. The row keeps the alert as it was decided (its text and
when: Alertmanager's startsAt), the sink's name, the attempts and the last error (with its credentials masked);
never a URL or a token (those are read from the configuration at each delivery).

Revision ID: 0025
Revises: 0024
Create Date: 2027-01-20
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

S = "attribution"
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table("alert_deliveries",
                    sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
                    sa.Column("key", sa.Text(), nullable=False),
                    sa.Column("sink", sa.Text(), nullable=False),
                    sa.Column("alert", postgresql.JSONB(), nullable=False),
                    sa.Column("created_at", TS, nullable=False),
                    sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
                    sa.Column("next_attempt_at", TS, nullable=False),
                    sa.Column("delivered_at", TS, nullable=True),
                    sa.Column("gave_up_at", TS, nullable=True),
                    sa.Column("last_error", sa.Text(), nullable=True),
                    sa.PrimaryKeyConstraint("id", name="pk_alert_deliveries"),
                    schema=S)
    op.create_index("ix_alert_deliveries_pending", "alert_deliveries", ["id"], schema=S,
                    postgresql_where=sa.text("delivered_at IS NULL AND gave_up_at IS NULL"))
    op.create_index("ix_alert_deliveries_created_at", "alert_deliveries", ["created_at"], schema=S)


def downgrade() -> None:
    op.drop_table("alert_deliveries", schema=S)
