"""indexes for a year of data: sessions listed by created_at, dead-letter stats from indexes

The session lists (`tickwork ls`, GET /api/v1/sessions, the approvals queue) are newest
first by created_at; the (status, updated_at) and (kind, updated_at) indexes could not give
that order, so a list read every session of the status (or the whole table) and sorted it.
They are replaced by (status, created_at) and (kind, created_at), and (created_at) serves the
unfiltered list. Dead-letter stats count by each grouping column: with (column, at) indexes
they read the index only, not the rows with their snapshots.

Revision ID: 0007_yeardata
Revises: 0006_observers
"""

from __future__ import annotations

from alembic import op

revision = "0007_yeardata"
down_revision = "0006_observers"
branch_labels = None
depends_on = None

GROUPED = ("kind", "model", "last_tool", "error_signature")


def upgrade() -> None:
    with op.batch_alter_table("tickwork_sessions") as batch:
        batch.drop_index("ix_tickwork_sessions_status_updated_at")
        batch.drop_index("ix_tickwork_sessions_kind_updated_at")
        batch.create_index("ix_tickwork_sessions_status_created_at", ["status", "created_at"])
        batch.create_index("ix_tickwork_sessions_kind_created_at", ["kind", "created_at"])
        batch.create_index("ix_tickwork_sessions_created_at", ["created_at"])
    with op.batch_alter_table("tickwork_dead_letters") as batch:
        for column in GROUPED:
            batch.create_index(f"ix_tickwork_dead_letters_{column}_at", [column, "at"])


def downgrade() -> None:
    with op.batch_alter_table("tickwork_dead_letters") as batch:
        for column in GROUPED:
            batch.drop_index(f"ix_tickwork_dead_letters_{column}_at")
    with op.batch_alter_table("tickwork_sessions") as batch:
        batch.drop_index("ix_tickwork_sessions_created_at")
        batch.drop_index("ix_tickwork_sessions_kind_created_at")
        batch.drop_index("ix_tickwork_sessions_status_created_at")
        batch.create_index("ix_tickwork_sessions_kind_updated_at", ["kind", "updated_at"])
        batch.create_index("ix_tickwork_sessions_status_updated_at", ["status", "updated_at"])
