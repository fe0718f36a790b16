"""Drain decisions: the loaded drain policy, node resumes, the audit of every decision, the real drain_candidates.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

S = "attribution"
TS = sa.DateTime(timezone=True)
SQL = Path(__file__).resolve().parent.parent / "sql"


def _views(folder: str) -> list[str]:
    return [p.read_text() for p in sorted((SQL / folder).glob("*.sql"))]


def _grant_views() -> None:
    """Readers see every view (the role exists from 0002; tolerate a database migrated without it)."""
    op.execute("""
        DO $$ BEGIN
          IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'attribution_reader') THEN
            GRANT SELECT ON attribution.drain_candidates TO attribution_reader;
          END IF;
        END $$""")


def upgrade() -> None:
    op.create_table(
        "drain_policies",
        sa.Column("version", sa.Text(), nullable=False),
        sa.Column("loaded_at", TS, server_default=sa.text("now()"), nullable=False),
        sa.Column("reason_prefix", sa.Text(), nullable=False),
        sa.Column("caps", pg.JSONB(), nullable=False),
        sa.Column("document", pg.JSONB(), nullable=False),
        sa.PrimaryKeyConstraint("version", name="pk_drain_policies"),
        schema=S,
    )
    op.create_table(
        "drain_conditions",
        sa.Column("policy_version", sa.Text(), nullable=False),
        sa.Column("condition_id", sa.Text(), nullable=False),
        sa.Column("kinds", pg.ARRAY(sa.Text()), nullable=True),
        sa.Column("per", sa.Text(), nullable=True),
        sa.Column("distinct_by", sa.Text(), nullable=True),
        sa.Column("culprit_distinct", sa.Text(), nullable=True),
        sa.Column("min_count", sa.Integer(), nullable=False),
        sa.Column("window_days", sa.Integer(), nullable=False),
        sa.Column("label", sa.Text(), nullable=False),
        sa.Column("score", sa.REAL(), nullable=False),
        sa.ForeignKeyConstraint(["policy_version"], [f"{S}.drain_policies.version"],
                                name="fk_drain_conditions_policy_version_drain_policies", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("policy_version", "condition_id", name="pk_drain_conditions"),
        schema=S,
    )
    op.create_table(
        "node_resumes",
        sa.Column("cluster", sa.Text(), nullable=False),
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("resumed_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("cluster", "node", name="pk_node_resumes"),
        schema=S,
    )
    op.create_table(
        "drain_actions",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("at", TS, server_default=sa.text("now()"), nullable=False),
        sa.Column("cluster", sa.Text(), nullable=False),
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("decision", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("evidence", pg.JSONB(), nullable=True),
        sa.Column("policy_version", sa.Text(), nullable=True),
        sa.Column("actor", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_drain_actions"),
        schema=S,
    )
    op.create_index("ix_drain_actions_cluster_at", "drain_actions", ["cluster", "at"], schema=S)
    # Covers what drain_candidates reads of recent causes, so the plan is an index-only scan of a small range
    # whatever the number of other events stored.
    op.create_index("ix_events_kind_occurred_at_node", "events", ["kind", "occurred_at", "node"], schema=S,
                    postgresql_where=sa.text("role = 'cause' AND handled_at IS NULL"),
                    postgresql_include=["gpu", "code", "id", "outcome"])
    op.execute(f"DROP VIEW {S}.drain_candidates")
    for sql in _views("0003"):
        if "VIEW attribution.drain_candidates" in sql:
            op.execute(sql)
    _grant_views()


def downgrade() -> None:
    op.execute(f"DROP VIEW {S}.drain_candidates")
    for sql in _views("0001"):
        if "VIEW attribution.drain_candidates" in sql:
            op.execute(sql)
    _grant_views()
    op.drop_index("ix_events_kind_occurred_at_node", table_name="events", schema=S)
    op.drop_index("ix_drain_actions_cluster_at", table_name="drain_actions", schema=S)
    for table in ("drain_actions", "node_resumes", "drain_conditions", "drain_policies"):
        op.drop_table(table, schema=S)
