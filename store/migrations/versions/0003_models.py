"""calls keep the provider's call id and the approval reason

Revision ID: 0003_models
Revises: 0002_ops
Create Date: 2026-12-01 01:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_models"
down_revision = "0002_ops"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tickwork_calls", schema=None) as batch_op:
        batch_op.add_column(sa.Column("provider_call_id", sa.String(length=128), nullable=True))
        batch_op.add_column(sa.Column("approval_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tickwork_calls", schema=None) as batch_op:
        batch_op.drop_column("approval_reason")
        batch_op.drop_column("provider_call_id")
