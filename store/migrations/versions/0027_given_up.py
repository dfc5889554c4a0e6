"""the webhook cards given up: a partial index `webhooks ls` and `webhooks resend` read

`tickwork webhooks ls` and `webhooks resend --all` look for the deliveries no dispatcher
tries any more (not delivered, no next attempt, not dropped because their session moved
on): a handful among every card ever sent, which they found by reading the whole of
`tickwork_deliveries` on Postgres. This index holds only those rows, by event, so the
look is one short index range on SQLite and Postgres; its predicate's terms are the
queries' own (SQLite uses a partial index only then). Nothing to backfill.

Revision ID: 0027_given_up
Revises: 0026_id_prefix
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027_given_up"
down_revision = "0026_id_prefix"
branch_labels = None
depends_on = None

#: not the cards whose session moved on before they went out (store/deliveries.py's
#: MOVED_ON, as it was written then): they are not to be sent
GIVEN_UP = (
    "delivered_at IS NULL AND next_attempt_at IS NULL AND last_error <> "
    "'the session moved on before its card was delivered'"
)


def upgrade() -> None:
    op.create_index(
        "ix_tickwork_deliveries_given_up",
        "tickwork_deliveries",
        ["event_id"],
        unique=False,
        postgresql_where=sa.text(GIVEN_UP),
        sqlite_where=sa.text(GIVEN_UP),
    )


def downgrade() -> None:
    op.drop_index("ix_tickwork_deliveries_given_up", table_name="tickwork_deliveries")
