"""the archive's index keeps a child's spawning call and role

An archived child named its parent in `parent_id` only, so it was listed as a fork of its
parent once archived. The index now keeps `spawn_call` (what makes a session a child) and
`role`, as `tickwork_sessions` does (0021_trees). Nothing to backfill: session trees came
with 0021_trees, in the same release.

Revision ID: 0023_archived_lineage
Revises: 0022_each
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023_archived_lineage"
down_revision = "0022_each"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tickwork_archived") as batch:
        batch.add_column(sa.Column("spawn_call", sa.String(64), nullable=True))
        batch.add_column(
            sa.Column("role", sa.String(64), nullable=False, server_default=sa.text("''"))
        )


def downgrade() -> None:
    with op.batch_alter_table("tickwork_archived") as batch:
        batch.drop_column("role")
        batch.drop_column("spawn_call")
