"""Rollups whose size does not grow with the length of the history: fault_series (one row per node, GPU, kind and
code) and failed_roots (failed jobs per root-cause fault and week). The fleet views read them.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

S = "attribution"
TS = sa.DateTime(timezone=True)
SQL = Path(__file__).resolve().parent.parent / "sql"
VIEWS = ("node_faults_weekly", "recurring_faults")
INFRA = "('gpu_hardware', 'nvlink', 'nvswitch_fabric', 'network', 'host')"


def _view(folder: str, name: str) -> str:
    """The definition of a view as of a revision: from its folder, else the newest earlier one that defines it
    (each migrations/sql/NNNN folder holds only the views that revision changed)."""
    for d in sorted((p for p in SQL.iterdir() if p.name <= folder), reverse=True):
        for p in sorted(d.glob("*.sql")):
            text = p.read_text()
            if f"VIEW attribution.{name} " in text:
                return text
    raise FileNotFoundError(f"{folder}: no definition of {name}")


def _grants() -> None:
    op.execute(f"""
        DO $$ BEGIN
          IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'attribution_reader') THEN
            GRANT SELECT ON {S}.node_faults_weekly, {S}.recurring_faults TO attribution_reader;
          END IF;
          IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'attribution_writer') THEN
            GRANT SELECT, INSERT, UPDATE ON {S}.fault_series, {S}.failed_roots TO attribution_writer;
          END IF;
        END $$""")


def upgrade() -> None:
    op.create_table(
        "fault_series",
        sa.Column("cluster", sa.Text(), nullable=False),
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("gpu_key", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("code_key", sa.Integer(), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("events", sa.BigInteger(), nullable=False),
        sa.Column("weeks", sa.Integer(), nullable=False),
        sa.Column("first_seen", TS, nullable=False),
        sa.Column("last_seen", TS, nullable=False),
        sa.PrimaryKeyConstraint("cluster", "node", "gpu_key", "kind", "code_key", name="pk_fault_series"),
        schema=S,
    )
    op.create_index("ix_fault_series_weeks", "fault_series", ["weeks"], schema=S)
    op.create_table(
        "failed_roots",
        sa.Column("cluster", sa.Text(), nullable=False),
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("gpu_key", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("code_key", sa.Integer(), nullable=False),
        sa.Column("week", sa.Date(), nullable=False),
        sa.Column("jobs", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("cluster", "node", "gpu_key", "kind", "code_key", "week", name="pk_failed_roots"),
        schema=S,
    )
    # Existing history: the series from the weekly rollup, the failed roots from the current verdicts.
    op.execute(f"""
        INSERT INTO {S}.fault_series (cluster, node, gpu_key, kind, code_key, role, outcome, scope, events, weeks,
                                      first_seen, last_seen)
        SELECT cluster, node, gpu_key, kind, code_key, min(role), min(outcome), min(scope), sum(events),
               count(DISTINCT week), min(first_seen), max(last_seen)
        FROM {S}.fault_weeks GROUP BY cluster, node, gpu_key, kind, code_key""")
    op.execute(f"""
        INSERT INTO {S}.failed_roots (cluster, node, gpu_key, kind, code_key, week, jobs)
        SELECT j.cluster, v.root_node, coalesce(v.root_gpu, ''), v.root_kind, coalesce(v.root_code, -1),
               (date_trunc('week', coalesce(v.root_time, j.end_time, j.start_time) AT TIME ZONE 'UTC'))::date,
               count(*)
        FROM {S}.jobs j JOIN {S}.verdicts v ON v.id = j.current_verdict_id
        WHERE v.root_node IS NOT NULL AND v.root_kind IS NOT NULL AND v.outcome IN {INFRA}
        GROUP BY 1, 2, 3, 4, 5, 6""")
    for name in VIEWS:
        op.execute(f"DROP VIEW {S}.{name}")
        op.execute(_view("0004", name))
    _grants()


def downgrade() -> None:
    for name in VIEWS:
        op.execute(f"DROP VIEW {S}.{name}")
        op.execute(_view("0003", name))
    op.execute(f"""
        DO $$ BEGIN
          IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'attribution_reader') THEN
            GRANT SELECT ON {S}.node_faults_weekly, {S}.recurring_faults TO attribution_reader;
          END IF;
        END $$""")
    op.drop_table("failed_roots", schema=S)
    op.drop_index("ix_fault_series_weeks", table_name="fault_series", schema=S)
    op.drop_table("fault_series", schema=S)
