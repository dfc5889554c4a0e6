"""retention: the index of archived sessions, and the indexes its scans need

Revision ID: 0008_lifecycle
Revises: 0007_yeardata
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from tickwork.store.schema import UTCDateTime

revision = "0008_lifecycle"
down_revision = "0007_yeardata"
branch_labels = None
depends_on = None

FINISHED = "status IN ('completed', 'cancelled', 'failed')"


def upgrade() -> None:
    op.create_table(
        "tickwork_archived",
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("location", sa.String(length=300), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("claimed_at", UTCDateTime(), nullable=False),
        sa.Column("archived_at", UTCDateTime(), nullable=True),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("kind", sa.String(length=200), nullable=False),
        sa.Column("parent_id", sa.String(length=64), nullable=True),
        sa.Column("fork_step", sa.Integer(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("finished_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", name="pk_tickwork_archived"),
    )
    op.create_index("ix_tickwork_archived_location", "tickwork_archived", ["location"])
    op.create_index("ix_tickwork_archived_parent_id", "tickwork_archived", ["parent_id"])
    op.create_index("ix_tickwork_archived_archived_at", "tickwork_archived", ["archived_at"])
    op.create_index(
        "ix_tickwork_archived_pending",
        "tickwork_archived",
        ["claimed_at"],
        postgresql_where=sa.text("state = 'pending'"),
        sqlite_where=sa.text("state = 'pending'"),
    )
    op.create_index(
        "ix_tickwork_dead_letters_resolved",
        "tickwork_dead_letters",
        ["resolved_at"],
        postgresql_where=sa.text("resolved_at IS NOT NULL"),
        sqlite_where=sa.text("resolved_at IS NOT NULL"),
    )
    # retention's scan: the finished sessions of a status, oldest first (running ones,
    # updated on every tick, are not in it)
    op.create_index(
        "ix_tickwork_sessions_finished",
        "tickwork_sessions",
        ["status", "updated_at"],
        postgresql_where=sa.text(FINISHED),
        sqlite_where=sa.text(FINISHED),
    )


def downgrade() -> None:
    op.drop_index("ix_tickwork_sessions_finished", table_name="tickwork_sessions")
    op.drop_index("ix_tickwork_dead_letters_resolved", table_name="tickwork_dead_letters")
    op.drop_table("tickwork_archived")
