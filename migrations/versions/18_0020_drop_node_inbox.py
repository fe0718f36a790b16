"""The node inbox goes: nodes report to the service only (the node collects, the centre diagnoses).

Undoes 0018: the `inbox_reports` table, `attribution.submit_report(text)` and the group role
`attribution_submitter` (kept when another database of the server or a login role still uses it). Reports still
waiting in the inbox are lost with it, so the upgrade refuses to run while any row is left: drain them first with
the previous release (`attribution db drain-inbox`), or delete them on purpose. The downgrade creates all of it
again, empty, exactly as 0018 did.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-02
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

S = "attribution"


def _inbox():
    """Migration 0018's module (its upgrade and downgrade are this one's downgrade and upgrade)."""
    path = Path(__file__).with_name("16_0018_node_inbox.py")
    spec = importlib.util.spec_from_file_location("attribution_migration_0018", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def upgrade() -> None:
    op.execute(f"""
        DO $$ BEGIN
          IF EXISTS (SELECT 1 FROM {S}.inbox_reports WHERE refused IS NULL) THEN
            RAISE EXCEPTION 'the node inbox still holds reports'
              USING HINT = 'store them first with the previous release (attribution db drain-inbox), or delete '
                           'them: DELETE FROM {S}.inbox_reports';
          END IF;
        END $$""")
    _inbox().downgrade()


def downgrade() -> None:
    _inbox().upgrade()
