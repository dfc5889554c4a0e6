"""delayed ticks wait in the outbox: tickwork_outbox.published_at

Revision ID: 0002_ops
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from tickwork.store.schema import UTCDateTime

revision = "0002_ops"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tickwork_outbox", schema=None) as batch_op:
        batch_op.add_column(sa.Column("published_at", UTCDateTime(), nullable=True))
        batch_op.create_index(
            "ix_tickwork_outbox_waiting",
            ["due_at"],
            unique=False,
            postgresql_where=sa.text("published_at IS NULL"),
            sqlite_where=sa.text("published_at IS NULL"),
        )
    # rows written before this revision were published by their writer (a countdown at most)
    op.execute("UPDATE tickwork_outbox SET published_at = due_at")


def downgrade() -> None:
    with op.batch_alter_table("tickwork_outbox", schema=None) as batch_op:
        batch_op.drop_index("ix_tickwork_outbox_waiting")
        batch_op.drop_column("published_at")
