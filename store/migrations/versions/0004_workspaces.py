"""workspaces: blobs and file changes

Revision ID: 0004_workspaces
Revises: 0003_models
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004_workspaces"
down_revision = "0003_models"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tickwork_blobs",
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("hash", name=op.f("pk_tickwork_blobs")),
    )
    op.create_table(
        "tickwork_file_changes",
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("call_id", sa.String(length=64), nullable=False),
        sa.Column(
            "changes",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("state", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["tickwork_sessions.id"],
            name=op.f("fk_tickwork_file_changes_session_id_tickwork_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("session_id", "version", name=op.f("pk_tickwork_file_changes")),
    )


def downgrade() -> None:
    op.drop_table("tickwork_file_changes")
    op.drop_table("tickwork_blobs")
