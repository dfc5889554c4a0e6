"""admission: priorities and concurrency keys, and the index of queued sessions

A session beyond its tenant's in-flight limit or its concurrency key's waits as `queued`
(no tick anywhere) until the relay admits it (docs/DESIGN.md section 15). Sessions record
their priority (0 for those stored before) and their concurrency key with its limit (NULL:
none). Two partial indexes: the queued sessions in admission order, and the sessions that
have a concurrency key, for the count of each key's sessions in flight. Nothing to backfill.

Revision ID: 0018_admission
Revises: 0017_tenants
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018_admission"
down_revision = "0017_tenants"
branch_labels = None
depends_on = None

QUEUED = "status = 'queued'"
KEYED = "concurrency_key IS NOT NULL"


def upgrade() -> None:
    with op.batch_alter_table("tickwork_sessions") as batch:
        batch.add_column(
            sa.Column("priority", sa.Integer(), nullable=False, server_default=sa.text("0"))
        )
        batch.add_column(sa.Column("concurrency_key", sa.String(200)))
        batch.add_column(sa.Column("max_per_key", sa.Integer()))
    op.create_index(
        "ix_tickwork_sessions_queued",
        "tickwork_sessions",
        ["tenant", "priority", "created_at"],
        postgresql_where=sa.text(QUEUED),
        sqlite_where=sa.text(QUEUED),
    )
    op.create_index(
        "ix_tickwork_sessions_concurrency_key",
        "tickwork_sessions",
        ["tenant", "concurrency_key", "status"],
        postgresql_where=sa.text(KEYED),
        sqlite_where=sa.text(KEYED),
    )


def downgrade() -> None:
    op.drop_index("ix_tickwork_sessions_concurrency_key", table_name="tickwork_sessions")
    op.drop_index("ix_tickwork_sessions_queued", table_name="tickwork_sessions")
    with op.batch_alter_table("tickwork_sessions") as batch:
        batch.drop_column("max_per_key")
        batch.drop_column("concurrency_key")
        batch.drop_column("priority")
