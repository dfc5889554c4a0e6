"""environments: a repair job's built environments and the sessions using them (issue 22)

Revision ID: 0010_environments
Revises: 0009_dlqrollup
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0010_environments"
down_revision = "0009_dlqrollup"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "tickwork_environments",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("chunks", JSON, nullable=False),
        sa.Column("log", sa.Text(), nullable=False),
        sa.Column("detail", JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_tickwork_environments"),
    )
    op.create_table(
        "tickwork_environment_uses",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["key"],
            ["tickwork_environments.key"],
            name="fk_tickwork_environment_uses_key_tickwork_environments",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["tickwork_sessions.id"],
            name="fk_tickwork_environment_uses_session_id_tickwork_sessions",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("key", "session_id", name="pk_tickwork_environment_uses"),
    )
    op.create_index(
        "ix_tickwork_environment_uses_session_id",
        "tickwork_environment_uses",
        ["session_id"],
    )


def downgrade() -> None:
    op.drop_index("ix_tickwork_environment_uses_session_id", table_name="tickwork_environment_uses")
    op.drop_table("tickwork_environment_uses")
    op.drop_table("tickwork_environments")
