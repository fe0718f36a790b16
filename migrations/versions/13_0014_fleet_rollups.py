"""Fleet queries that do not grow with the length of the history (#16, target 4). failed_root_series: failed jobs
per root-cause fault over all weeks, kept with the verdicts beside failed_roots (per week), so recurring_faults
reads one row per fault instead of summing every week of the history. drain_candidates_at: the earliest time its
policy reads goes into the query as a literal (the events' months are pruned when the query is planned, not after
every month was planned) and each match's jobs are found by their key (job_id, id) instead of by id alone, which
no index served (every job of the history was read).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

S = "attribution"
SQL = Path(__file__).resolve().parent.parent / "sql"
DRAIN_FUNCTION = f"{S}.drain_candidates_at(timestamptz, text)"


def _if_role(role: str, statement: str) -> str:
    return (f"DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{role}') THEN {statement}; "
            f"END IF; END $$")


def _views(folder: str) -> None:
    op.execute(f"DROP VIEW {S}.recurring_faults")
    op.execute(f"DROP VIEW {S}.drain_candidates")
    op.execute(f"DROP FUNCTION {DRAIN_FUNCTION}")
    op.execute((SQL / folder / "40_recurring_faults.sql").read_text())
    op.execute((SQL / folder / "50_drain_candidates.sql").read_text())
    op.execute(_if_role("attribution_reader",
                        f"GRANT SELECT ON {S}.recurring_faults, {S}.drain_candidates TO attribution_reader"))
    op.execute(f"REVOKE ALL ON FUNCTION {DRAIN_FUNCTION} FROM PUBLIC")
    for role in ("attribution_reader", "attribution_writer"):
        op.execute(_if_role(role, f"GRANT EXECUTE ON FUNCTION {DRAIN_FUNCTION} TO {role}"))


def upgrade() -> None:
    op.create_table(
        "failed_root_series",
        sa.Column("cluster", sa.Text(), nullable=False),
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("gpu_key", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("code_key", sa.Integer(), nullable=False),
        sa.Column("jobs", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("cluster", "node", "gpu_key", "kind", "code_key", name="pk_failed_root_series"),
        schema=S,
    )
    # the existing history: the weekly rollup summed
    op.execute(f"""
        INSERT INTO {S}.failed_root_series (cluster, node, gpu_key, kind, code_key, jobs)
        SELECT cluster, node, gpu_key, kind, code_key, sum(jobs) FROM {S}.failed_roots
        GROUP BY cluster, node, gpu_key, kind, code_key""")
    # on Citus, `attribution db distribute` run again puts the new table beside the others (models.DISTRIBUTION)
    op.execute(_if_role("attribution_writer",
                        f"GRANT SELECT, INSERT, UPDATE ON {S}.failed_root_series TO attribution_writer"))
    _views(revision)
    # readers may SELECT the columns the views read (0007): those recurring_faults now reads of the new table
    op.execute(_if_role("attribution_reader",
                        f"GRANT SELECT (cluster, node, gpu_key, kind, code_key, jobs) ON {S}.failed_root_series "
                        f"TO attribution_reader"))


def downgrade() -> None:
    _views("0007")
    op.drop_table("failed_root_series", schema=S)
