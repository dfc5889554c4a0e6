"""a session is found by the start of its id through an index on Postgres

`ids_starting` (the CLI's short ids) and the API's `id_prefix` compare the start of each
id: a scan of the sessions (and archived sessions). Postgres's `LIKE 'abc%'` takes a
b-tree index only with a pattern operator class unless the database's collation is C, so
each id gets one (`varchar_pattern_ops`, the ids being VARCHAR). On SQLite, whose LIKE
ignores case and takes no index, the same index is a plain one (the schema is one for
both databases).

Creating them locks writes to the two tables while the index is built (seconds for a
million sessions).

Revision ID: 0026_id_prefix
Revises: 0025_archived_submitter
"""

from __future__ import annotations

from alembic import op

revision = "0026_id_prefix"
down_revision = "0025_archived_submitter"
branch_labels = None
depends_on = None

#: each index, its table and column
INDEXES = (
    ("ix_tickwork_sessions_id_prefix", "tickwork_sessions", "id"),
    ("ix_tickwork_archived_id_prefix", "tickwork_archived", "session_id"),
)


def upgrade() -> None:
    for name, table, column in INDEXES:
        op.create_index(name, table, [column], postgresql_ops={column: "varchar_pattern_ops"})


def downgrade() -> None:
    for name, table, _ in INDEXES:
        op.drop_index(name, table_name=table)
