"""Drains that know a node's life (#31). node_life: what the store learns about a node's state changes (its boots
from the kernel's banner, a job context's boot_time and Slurm's BootTime; Slurm's drains and resumes, who made
them and when; `attribution drain resume`), node_states: Slurm's last view of each node (what `attribution drain
sync-nodes` compares the next one with), drain_conditions.recurrence: a condition that counts all of its evidence.
The drain plan (drain_candidates_at, now over drain_conditions_at: every condition's progress on a node) counts,
for a one-shot condition, only the evidence from after the node's last reboot or resume, and names the ISO weeks
of a recurrence condition's evidence in its reason. The resumes made so far (drain_actions, node_resumes) become
the first rows of node_life, so a database upgraded with resumed nodes plans as before.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-02
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

S = "attribution"
TS = sa.DateTime(timezone=True)
SQL = Path(__file__).resolve().parent.parent / "sql"
CANDIDATES = f"{S}.drain_candidates_at(timestamptz, text)"
CONDITIONS = f"{S}.drain_conditions_at(timestamptz, text, text, text)"


def _if_role(role: str, statement: str) -> str:
    return (f"DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{role}') THEN {statement}; "
            f"END IF; END $$")


def _drop_plan(new: bool) -> None:
    op.execute(f"DROP VIEW {S}.drain_candidates")
    op.execute(f"DROP FUNCTION {CANDIDATES}")
    if new:
        op.execute(f"DROP FUNCTION {CONDITIONS}")
        op.execute(f"DROP FUNCTION {S}.iso_weeks(date[])")


def _make_plan(folder: str, new: bool) -> None:
    op.execute((SQL / folder / "50_drain_candidates.sql").read_text())
    op.execute(_if_role("attribution_reader", f"GRANT SELECT ON {S}.drain_candidates TO attribution_reader"))
    for fn in (CANDIDATES, CONDITIONS) if new else (CANDIDATES,):
        op.execute(f"REVOKE ALL ON FUNCTION {fn} FROM PUBLIC")
        for role in ("attribution_reader", "attribution_writer"):
            op.execute(_if_role(role, f"GRANT EXECUTE ON FUNCTION {fn} TO {role}"))


def upgrade() -> None:
    op.create_table(
        "node_life",
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("cluster", sa.Text(), nullable=False),
        sa.Column("at", TS, nullable=False),
        sa.Column("what", sa.Text(), nullable=False),  # boot | resume | drain | down
        sa.Column("source", sa.Text(), nullable=False),  # kernel | context | slurm | attribution
        sa.Column("actor", sa.Text(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("recorded_at", TS, server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("node", "cluster", "what", "at", "source", name="pk_node_life"),
        schema=S,
    )
    op.create_index("ix_node_life_at", "node_life", ["at"], schema=S)
    op.create_table(
        "node_states",
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("cluster", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("reason_user", sa.Text(), nullable=True),
        sa.Column("reason_at", TS, nullable=True),
        sa.Column("boot_time", TS, nullable=True),
        sa.Column("slurmd_start", TS, nullable=True),
        sa.Column("seen_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("node", "cluster", name="pk_node_states"),
        schema=S,
    )
    op.add_column("drain_conditions", sa.Column("recurrence", sa.Boolean(), server_default=sa.text("false"),
                                                nullable=False), schema=S)
    # the resumes made so far: each one the audit recorded, and the newest of each node (node_resumes)
    op.execute(f"""
        INSERT INTO {S}.node_life (node, cluster, at, what, source, actor, detail)
        SELECT node, cluster, at, 'resume', 'attribution', actor, detail FROM {S}.drain_actions
        WHERE decision = 'resumed'
        UNION
        SELECT node, cluster, resumed_at, 'resume', 'attribution', NULL, 'resumed by attribution drain resume'
        FROM {S}.node_resumes r
        WHERE NOT EXISTS (SELECT 1 FROM {S}.drain_actions a WHERE a.node = r.node AND a.cluster = r.cluster
                          AND a.decision = 'resumed' AND a.at = r.resumed_at)
        ON CONFLICT DO NOTHING""")
    # ingest records the boots its evidence shows (a kernel banner, a context's boot_time): the writer may add
    # them (INSERT ... ON CONFLICT DO NOTHING), never read, change or delete one
    op.execute(_if_role("attribution_writer", f"GRANT INSERT ON {S}.node_life TO attribution_writer"))
    _drop_plan(new=False)
    _make_plan(revision, new=True)


def downgrade() -> None:
    _drop_plan(new=True)
    _make_plan("0014", new=False)
    op.drop_column("drain_conditions", "recurrence", schema=S)
    op.drop_table("node_states", schema=S)
    op.drop_index("ix_node_life_at", table_name="node_life", schema=S)
    op.drop_table("node_life", schema=S)
