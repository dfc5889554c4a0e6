"""the archive's index keeps who submitted each archived session

An own-only token sees the forks it made of a session; for an archived fork the API read
the fork back from its archive batch to learn who made it (a whole batch read a fork, and
503 when the archive could not be read). The index now keeps `submitted_by`, as
`tickwork_sessions` does. Rows archived before are NULL (unknown): they are read back as
before.

Revision ID: 0025_archived_submitter
Revises: 0024_prompt_estimate
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025_archived_submitter"
down_revision = "0024_prompt_estimate"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tickwork_archived") as batch:
        batch.add_column(sa.Column("submitted_by", sa.String(200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tickwork_archived") as batch:
        batch.drop_column("submitted_by")
