"""finished cards: a partial index on the events that end a session

With TICKWORK_WEBHOOK_EVENTS naming `finished`, the webhook dispatcher looks for the ends
of sessions (`completed`, `failed`, `cancelled` events) younger than
TICKWORK_WEBHOOK_MAX_AGE_S with no delivery yet. This index holds only those events, by
time, so the look is one short index range on SQLite and Postgres, whatever the number of
other events; nothing to backfill (the age bound keeps old ends from being sent).

Revision ID: 0016_cards
Revises: 0015_versions
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016_cards"
down_revision = "0015_versions"
branch_labels = None
depends_on = None

FINISHED = "kind IN ('completed', 'failed', 'cancelled')"


def upgrade() -> None:
    op.create_index(
        "ix_tickwork_events_finished",
        "tickwork_events",
        ["at"],
        unique=False,
        postgresql_where=sa.text(FINISHED),
        sqlite_where=sa.text(FINISHED),
    )


def downgrade() -> None:
    op.drop_index("ix_tickwork_events_finished", table_name="tickwork_events")
