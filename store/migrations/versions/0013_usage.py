"""steps keep the prompt tokens read from and written to the provider's prompt cache

Revision ID: 0013_usage
Revises: 0009_dlqrollup
Create Date: 2026-12-01 16:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_usage"
down_revision = "0009_dlqrollup"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # the steps recorded before were billed without a cache discount as far as tickwork knows
    with op.batch_alter_table("tickwork_steps", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("cached_prompt_tokens", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(
            sa.Column("cache_creation_tokens", sa.Integer(), nullable=False, server_default="0")
        )
    # the default was for the rows already there: the store writes both columns (and its
    # Postgres appends skip columns the database defaults)
    with op.batch_alter_table("tickwork_steps", schema=None) as batch_op:
        batch_op.alter_column("cached_prompt_tokens", server_default=None)
        batch_op.alter_column("cache_creation_tokens", server_default=None)


def downgrade() -> None:
    with op.batch_alter_table("tickwork_steps", schema=None) as batch_op:
        batch_op.drop_column("cache_creation_tokens")
        batch_op.drop_column("cached_prompt_tokens")
