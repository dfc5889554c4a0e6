"""sessions record who submitted them

Revision ID: 0005_api
Revises: 0004_workspaces
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_api"
down_revision = "0004_workspaces"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tickwork_sessions") as batch:
        batch.add_column(
            sa.Column(
                "submitted_by", sa.String(length=200), nullable=False, server_default=sa.text("''")
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("tickwork_sessions") as batch:
        batch.drop_column("submitted_by")
