"""The Kueue watcher's state (`attribution watch kueue`, docs/kubernetes.md): the resourceVersion each watched
collection was handled up to (kueue_watch_bookmarks), and which run of which workload has its verdict stored
(kueue_watch_attempts: once per workload UID and attempt), so that a restarted watcher resumes without gaps or
duplicates. The writer (the watcher's role) may read, insert and update both; nobody deletes.

Revision ID: 0022
Revises: 0021
Create Date: 2027-01-10
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

S = "attribution"
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table("kueue_watch_bookmarks",
                    sa.Column("cluster", sa.Text(), nullable=False),
                    sa.Column("resource", sa.Text(), nullable=False),
                    sa.Column("resource_version", sa.Text(), nullable=False),
                    sa.Column("updated_at", TS, server_default=sa.text("now()"), nullable=False),
                    sa.PrimaryKeyConstraint("cluster", "resource", name="pk_kueue_watch_bookmarks"),
                    schema=S)
    op.create_table("kueue_watch_attempts",
                    sa.Column("cluster", sa.Text(), nullable=False),
                    sa.Column("workload_uid", sa.Text(), nullable=False),
                    sa.Column("attempt_key", sa.Text(), nullable=False),
                    sa.Column("attempt", sa.Integer(), nullable=False),
                    sa.Column("namespace", sa.Text(), nullable=False),
                    sa.Column("name", sa.Text(), nullable=False),
                    sa.Column("job_id", sa.Text(), nullable=False),
                    sa.Column("outcome", sa.Text(), nullable=True),
                    sa.Column("ended_at", TS, nullable=True),
                    sa.Column("stored_at", TS, server_default=sa.text("now()"), nullable=False),
                    sa.PrimaryKeyConstraint("cluster", "workload_uid", "attempt_key", name="pk_kueue_watch_attempts"),
                    schema=S)
    op.execute(f"""
        DO $$ BEGIN
          IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'attribution_writer') THEN
            GRANT SELECT, INSERT, UPDATE ON {S}.kueue_watch_bookmarks, {S}.kueue_watch_attempts
              TO attribution_writer;
          END IF;
        END $$""")


def downgrade() -> None:
    op.drop_table("kueue_watch_attempts", schema=S)
    op.drop_table("kueue_watch_bookmarks", schema=S)
