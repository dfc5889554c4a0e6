"""the outcome of a finished repair (repaired, tests_failing, tests_not_run, no_changes)

Kept from the session's `result` in a column of its own, indexed with `created_at`, so
`tickwork ls --outcome` and the API's `?outcome=` read one index range newest first, as
the status and kind filters do, on SQLite and Postgres alike. Sessions stored before have
none recorded in their result: their column stays NULL (shown `-`), nothing to backfill.

Revision ID: 0011_outcome
Revises: 0010_environments
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_outcome"
down_revision = "0010_environments"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tickwork_sessions") as batch:
        batch.add_column(sa.Column("outcome", sa.String(length=32), nullable=True))
        batch.create_index("ix_tickwork_sessions_outcome_created_at", ["outcome", "created_at"])


def downgrade() -> None:
    with op.batch_alter_table("tickwork_sessions") as batch:
        batch.drop_index("ix_tickwork_sessions_outcome_created_at")
        batch.drop_column("outcome")
