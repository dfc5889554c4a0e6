"""steps keep the prompt tokens read from and written to the provider's prompt cache

Revision ID: 0013_usage
Revises: 0012_context
Create Date: 2026-12-01 16:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_usage"
down_revision = "0012_context"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # nullable: the steps already stored, and those a worker not yet upgraded writes during
    # a rolling upgrade, did not count them (read as 0)
    with op.batch_alter_table("tickwork_steps", schema=None) as batch_op:
        batch_op.add_column(sa.Column("cached_prompt_tokens", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("cache_creation_tokens", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tickwork_steps", schema=None) as batch_op:
        batch_op.drop_column("cache_creation_tokens")
        batch_op.drop_column("cached_prompt_tokens")
