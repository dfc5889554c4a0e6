"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-29 15:31:15.550000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql
from tickwork.store.schema import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table(
        "tickwork_dead_letters",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("code", sa.String(length=32), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("kind", sa.String(length=200), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("last_tool", sa.String(length=200), nullable=True),
        sa.Column("error_signature", sa.String(length=300), nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("schema_version", sa.Integer(), nullable=False),
        sa.Column(
            "snapshot",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("resolved_at", UTCDateTime(), nullable=True),
        sa.Column(
            "resolution",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tickwork_dead_letters")),
        sa.UniqueConstraint("session_id", name=op.f("uq_tickwork_dead_letters_session_id")),
    )
    with op.batch_alter_table("tickwork_dead_letters", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_tickwork_dead_letters_at"), ["at"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_tickwork_dead_letters_code_at"), ["code", "at"], unique=False
        )
        batch_op.create_index(
            "ix_tickwork_dead_letters_unresolved",
            ["at"],
            unique=False,
            postgresql_where=sa.text("resolved_at IS NULL"),
            sqlite_where=sa.text("resolved_at IS NULL"),
        )

    op.create_table(
        "tickwork_sessions",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=200), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column(
            "budgets",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "input",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "config",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("tokens", sa.BigInteger(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.Column("loop_interventions", sa.Integer(), nullable=False),
        sa.Column("model_attempts", sa.Integer(), nullable=False),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("error_code", sa.String(length=32), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=False),
        sa.Column("final_answer", sa.Text(), nullable=True),
        sa.Column(
            "result",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("parent_id", sa.String(length=64), nullable=True),
        sa.Column("fork_step", sa.Integer(), nullable=True),
        sa.Column(
            "awaiting",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("lease_owner", sa.String(length=200), nullable=True),
        sa.Column("lease_expires_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tickwork_sessions")),
    )
    with op.batch_alter_table("tickwork_sessions", schema=None) as batch_op:
        batch_op.create_index(
            "ix_tickwork_sessions_expired_leases",
            ["lease_expires_at"],
            unique=False,
            postgresql_where=sa.text(
                "status IN ('ready', 'executing') AND lease_expires_at IS NOT NULL"
            ),
            sqlite_where=sa.text(
                "status IN ('ready', 'executing') AND lease_expires_at IS NOT NULL"
            ),
        )
        batch_op.create_index(
            batch_op.f("ix_tickwork_sessions_kind_updated_at"), ["kind", "updated_at"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_tickwork_sessions_parent_id"), ["parent_id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_tickwork_sessions_status_updated_at"),
            ["status", "updated_at"],
            unique=False,
        )

    op.create_table(
        "tickwork_calls",
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("call_id", sa.String(length=64), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column(
            "arguments",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column("raw_arguments", sa.Text(), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("needs_approval", sa.Boolean(), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["tickwork_sessions.id"],
            name=op.f("fk_tickwork_calls_session_id_tickwork_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("session_id", "call_id", name=op.f("pk_tickwork_calls")),
    )
    with op.batch_alter_table("tickwork_calls", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_tickwork_calls_session_id_step"), ["session_id", "step"], unique=False
        )

    op.create_table(
        "tickwork_decisions",
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("call_id", sa.String(length=64), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("approver", sa.String(length=200), nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("comment", sa.Text(), nullable=False),
        sa.Column(
            "arguments",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column("feedback", sa.Text(), nullable=False),
        sa.Column("output", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["tickwork_sessions.id"],
            name=op.f("fk_tickwork_decisions_session_id_tickwork_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "session_id", "call_id", "attempt", name=op.f("pk_tickwork_decisions")
        ),
    )
    op.create_table(
        "tickwork_events",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column(
            "data",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["tickwork_sessions.id"],
            name=op.f("fk_tickwork_events_session_id_tickwork_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tickwork_events")),
    )
    with op.batch_alter_table("tickwork_events", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_tickwork_events_session_id_id"), ["session_id", "id"], unique=False
        )

    op.create_table(
        "tickwork_observations",
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("call_id", sa.String(length=64), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("is_error", sa.Boolean(), nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("duration_ms", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["tickwork_sessions.id"],
            name=op.f("fk_tickwork_observations_session_id_tickwork_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("session_id", "call_id", name=op.f("pk_tickwork_observations")),
    )
    op.create_table(
        "tickwork_outbox",
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("due_at", UTCDateTime(), nullable=False),
        sa.Column("republished", sa.Integer(), server_default="0", nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["tickwork_sessions.id"],
            name=op.f("fk_tickwork_outbox_session_id_tickwork_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("session_id", "version", name=op.f("pk_tickwork_outbox")),
    )
    with op.batch_alter_table("tickwork_outbox", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_tickwork_outbox_due_at"), ["due_at"], unique=False)

    op.create_table(
        "tickwork_steps",
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("thought", sa.Text(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("trace_id", sa.String(length=64), nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["tickwork_sessions.id"],
            name=op.f("fk_tickwork_steps_session_id_tickwork_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("session_id", "step", name=op.f("pk_tickwork_steps")),
    )


def downgrade() -> None:

    op.drop_table("tickwork_steps")
    with op.batch_alter_table("tickwork_outbox", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_tickwork_outbox_due_at"))

    op.drop_table("tickwork_outbox")
    op.drop_table("tickwork_observations")
    with op.batch_alter_table("tickwork_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_tickwork_events_session_id_id"))

    op.drop_table("tickwork_events")
    op.drop_table("tickwork_decisions")
    with op.batch_alter_table("tickwork_calls", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_tickwork_calls_session_id_step"))

    op.drop_table("tickwork_calls")
    with op.batch_alter_table("tickwork_sessions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_tickwork_sessions_status_updated_at"))
        batch_op.drop_index(batch_op.f("ix_tickwork_sessions_parent_id"))
        batch_op.drop_index(batch_op.f("ix_tickwork_sessions_kind_updated_at"))
        batch_op.drop_index(
            "ix_tickwork_sessions_expired_leases",
            postgresql_where=sa.text(
                "status IN ('ready', 'executing') AND lease_expires_at IS NOT NULL"
            ),
            sqlite_where=sa.text(
                "status IN ('ready', 'executing') AND lease_expires_at IS NOT NULL"
            ),
        )

    op.drop_table("tickwork_sessions")
    with op.batch_alter_table("tickwork_dead_letters", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_tickwork_dead_letters_unresolved",
            postgresql_where=sa.text("resolved_at IS NULL"),
            sqlite_where=sa.text("resolved_at IS NULL"),
        )
        batch_op.drop_index(batch_op.f("ix_tickwork_dead_letters_code_at"))
        batch_op.drop_index(batch_op.f("ix_tickwork_dead_letters_at"))

    op.drop_table("tickwork_dead_letters")
