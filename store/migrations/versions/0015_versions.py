"""sessions record the runtime level a worker needs to run them

A worker claims only sessions of its own runtime level or below (tickwork.fsm.values.RUNTIME_LEVEL),
so an older worker in a rolling upgrade leaves a newer session alone. The sessions already
stored (0.1.0 recorded no level) need level 1, the server default.

Revision ID: 0015_versions
Revises: 0013_usage
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015_versions"
down_revision = "0013_usage"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tickwork_sessions") as batch:
        batch.add_column(
            sa.Column("runtime_level", sa.Integer(), nullable=False, server_default=sa.text("1"))
        )


def downgrade() -> None:
    with op.batch_alter_table("tickwork_sessions") as batch:
        batch.drop_column("runtime_level")
