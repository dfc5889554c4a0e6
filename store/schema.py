"""The tables: a small head row per session, append-only rows for everything else."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Date,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator
from tickwork.fsm.values import MAX_PROVIDER_CALL_ID, RUNNABLE

#: why a card stopped being tried because its session moved on (store/deliveries.py)
MOVED_ON = "the session moved on before its card was delivered"
#: the predicate of the partial index of the cards given up (migration 0027_given_up): not
#: delivered, no next attempt, and not dropped because their session moved on; literal SQL
#: in the queries too, since SQLite uses a partial index only for its predicate's terms
GIVEN_UP_SQL = f"delivered_at IS NULL AND next_attempt_at IS NULL AND last_error <> '{MOVED_ON}'"
#: the predicate of the partial index of the cards due (`ix_tickwork_deliveries_due`): not
#: delivered, with a next attempt; literal SQL in the queries too, as GIVEN_UP_SQL
DUE_SQL = "delivered_at IS NULL AND next_attempt_at IS NOT NULL"

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

Json = JSON().with_variant(JSONB(), "postgresql")
#: the partial indexes' condition: a session with a tick queued or due
RUNNABLE_SQL = "status IN ({})".format(", ".join(f"'{s.value}'" for s in RUNNABLE))


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite keeps no zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: tickwork stores UTC-aware times")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _session_fk() -> ForeignKey:
    return ForeignKey("tickwork_sessions.id", ondelete="CASCADE")


sessions = Table(
    "tickwork_sessions",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("kind", String(200), nullable=False),
    Column("status", String(32), nullable=False),
    Column("version", Integer, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("model", String(200), nullable=False),
    Column("budgets", Json, nullable=False),
    Column("input", Json, nullable=False),
    Column("config", Json, nullable=False),
    Column("step", Integer, nullable=False),
    Column("tokens", BigInteger, nullable=False),
    Column("cost_usd", Float, nullable=False),
    Column("loop_interventions", Integer, nullable=False),
    Column("model_attempts", Integer, nullable=False),
    Column("cancel_requested", Boolean, nullable=False),
    Column("error_code", String(32)),
    Column("error_message", Text, nullable=False),
    Column("final_answer", Text),
    Column("result", Json, nullable=False),
    Column("parent_id", String(64)),
    Column("fork_step", Integer),
    Column("awaiting", Json, nullable=False),
    Column("lease_owner", String(200)),
    Column("lease_expires_at", UTCDateTime),
    Column("submitted_by", String(200), nullable=False, server_default=text("''")),
    # what a finished repair achieved (fsm/outcomes.py), kept from `result` for `ls
    # --outcome`; NULL for other kinds and sessions stored before it (0011_outcome)
    Column("outcome", String(32)),
    # the runtime level a worker needs (tickwork.fsm.values.RUNTIME_LEVEL); the claim compares it
    # (0015_versions): rows of 0.1.0, which recorded none, need level 1
    Column("runtime_level", Integer, nullable=False, server_default=text("1")),
    #: the tenant it belongs to (tickwork.fsm.tenants); rows stored before it are the
    #: default tenant's (0017_tenants)
    Column("tenant", String(64), nullable=False, server_default=text("'default'")),
    # admission (0018_admission): order within the tenant, and at most max_per_key sessions
    # of the tenant's concurrency key in flight (tickwork.fsm.admission)
    Column("priority", Integer, nullable=False, server_default=text("0")),
    Column("concurrency_key", String(200)),
    Column("max_per_key", Integer),
    # a child session (0021_trees, docs/DESIGN.md section 16): the root of its tree, the
    # parent's call that spawned it (parent_id is the parent), its role; NULL/'' otherwise
    Column("root_id", String(64)),
    Column("spawn_call", String(64)),
    Column("role", String(64), nullable=False, server_default=text("''")),
    # the lists are newest first by created_at (0007_yeardata)
    Index(None, "status", "created_at"),
    Index(None, "kind", "created_at"),
    Index(None, "created_at"),
    Index(None, "parent_id"),
    Index(None, "root_id"),
    Index(None, "outcome", "created_at"),
    # a tenant's listings, and its quotas' counts (0017_tenants)
    Index(None, "tenant", "created_at"),
    # the sessions that wait to start (never ticked): a submit counts its tenant's
    Index(
        "ix_tickwork_sessions_unstarted",
        "tenant",
        postgresql_where=text("version = 0"),
        sqlite_where=text("version = 0"),
    ),
    # retention's scan: the finished sessions of a status, oldest first (0008_lifecycle)
    Index(
        "ix_tickwork_sessions_finished",
        "status",
        "updated_at",
        postgresql_where=text("status IN ('completed', 'cancelled', 'failed')"),
        sqlite_where=text("status IN ('completed', 'cancelled', 'failed')"),
    ),
    # the relay's scan for runnable sessions whose worker died
    Index(
        "ix_tickwork_sessions_expired_leases",
        "lease_expires_at",
        postgresql_where=text(f"{RUNNABLE_SQL} AND lease_expires_at IS NOT NULL"),
        sqlite_where=text(f"{RUNNABLE_SQL} AND lease_expires_at IS NOT NULL"),
    ),
    # admission's scan: a tenant's queued sessions, highest priority then oldest first
    Index(
        "ix_tickwork_sessions_queued",
        "tenant",
        "priority",
        "created_at",
        postgresql_where=text("status = 'queued'"),
        sqlite_where=text("status = 'queued'"),
    ),
    # admission's count of a concurrency key's sessions
    Index(
        "ix_tickwork_sessions_concurrency_key",
        "tenant",
        "concurrency_key",
        "status",
        postgresql_where=text("concurrency_key IS NOT NULL"),
        sqlite_where=text("concurrency_key IS NOT NULL"),
    ),
    # a session named by the start of its id (`ids_starting`, the API's `id_prefix`):
    # Postgres's LIKE 'abc%' takes only a pattern index unless the database's collation
    # is C (0026_id_prefix); on SQLite it is a plain one
    Index("ix_tickwork_sessions_id_prefix", "id", postgresql_ops={"id": "varchar_pattern_ops"}),
)

steps = Table(
    "tickwork_steps",
    metadata,
    Column("session_id", String(64), _session_fk(), primary_key=True),
    Column("step", Integer, primary_key=True),
    Column("thought", Text, nullable=False),
    Column("prompt_tokens", Integer, nullable=False),
    Column("completion_tokens", Integer, nullable=False),
    #: of prompt_tokens, those read from and written to the provider's prompt cache
    #: (0013_usage); NULL: a step written by a tickwork that did not count them, as 0
    Column("cached_prompt_tokens", Integer),
    Column("cache_creation_tokens", Integer),
    Column("cost_usd", Float, nullable=False),
    Column("latency_ms", Float, nullable=False),
    Column("fingerprint", String(64), nullable=False),
    Column("model", String(200), nullable=False),
    Column("trace_id", String(64), nullable=False),
    Column("at", UTCDateTime, nullable=False),
    # the context a model saw (fsm/context.py, 0012_context); nullable without server
    # defaults (the Postgres save names every column without one, postgres.py), so a worker
    # of the release before, or a raw insert, still writes steps: NULL reads as a reply, 0
    Column("kind", String(16)),
    Column("masked_through", Integer),
    Column("compacted_through", Integer),
    # the estimate a reply's prompt was sent with (`Step.prompt_estimate`, 0024_prompt_estimate);
    # NULL: a step written before, or by a worker of the release before: its prompt is rebuilt
    Column("prompt_estimate", Integer),
    # a THINK on a cache miss finds the latest compaction without reading every step
    Index(
        "ix_tickwork_steps_compactions",
        "session_id",
        "step",
        postgresql_where=text("kind = 'compaction'"),
        sqlite_where=text("kind = 'compaction'"),
    ),
)

calls = Table(
    "tickwork_calls",
    metadata,
    Column("session_id", String(64), _session_fk(), primary_key=True),
    Column("call_id", String(64), primary_key=True),
    Column("step", Integer, nullable=False),
    Column("index", Integer, nullable=False),
    Column("name", String(200), nullable=False),
    Column("arguments", Json),
    Column("raw_arguments", Text, nullable=False),
    Column("fingerprint", String(64), nullable=False),
    Column("state", String(32), nullable=False),
    Column("needs_approval", Boolean, nullable=False),
    Column("started_at", UTCDateTime),
    #: the model provider's id of the call, sent back with its result (None: `call_id`)
    Column("provider_call_id", String(MAX_PROVIDER_CALL_ID)),
    #: why the approval rules asked for a person, shown to the approver
    Column("approval_reason", Text),
    Index(None, "session_id", "step"),
)

observations = Table(
    "tickwork_observations",
    metadata,
    Column("session_id", String(64), _session_fk(), primary_key=True),
    Column("call_id", String(64), primary_key=True),
    Column("content", Text, nullable=False),
    Column("is_error", Boolean, nullable=False),
    Column("at", UTCDateTime, nullable=False),
    Column("duration_ms", Float, nullable=False),
)

decisions = Table(
    "tickwork_decisions",
    metadata,
    # the primary key is what makes "each call is decided once" hold under any race;
    # `attempt` counts the waits of one call (approval, then in doubt after a crash)
    Column("session_id", String(64), _session_fk(), primary_key=True),
    Column("call_id", String(64), primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("kind", String(32), nullable=False),
    Column("approver", String(200), nullable=False),
    Column("at", UTCDateTime, nullable=False),
    Column("fingerprint", String(64), nullable=False),
    Column("comment", Text, nullable=False),
    Column("arguments", Json),
    Column("feedback", Text, nullable=False),
    Column("output", Text, nullable=False),
)

events = Table(
    "tickwork_events",
    metadata,
    Column(
        "id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("session_id", String(64), _session_fk(), nullable=False),
    Column("version", Integer, nullable=False),
    Column("kind", String(32), nullable=False),
    Column("at", UTCDateTime, nullable=False),
    Column("data", Json, nullable=False),
    Index(None, "session_id", "id"),
    # the ends of sessions by time: the outbox of the webhook's finished cards (0016_cards)
    Index(
        "ix_tickwork_events_finished",
        "at",
        postgresql_where=text("kind IN ('completed', 'failed', 'cancelled')"),
        sqlite_where=text("kind IN ('completed', 'failed', 'cancelled')"),
    ),
)

joins = Table(
    "tickwork_joins",
    metadata,
    # the join of one spawn (docs/DESIGN.md section 16): the parent's call waits for
    # `expected` children; each child's last save counts itself here, in its transaction,
    # and the one that completes the join wakes the parent (store/trees.py)
    Column("parent_id", String(64), _session_fk(), primary_key=True),
    Column("call_id", String(64), primary_key=True),
    Column("mode", String(16), nullable=False),
    Column("expected", Integer, nullable=False),
    Column("ended", Integer, nullable=False),
    #: the ended children's cost and tokens, charged to the parent at the join
    Column("cost_usd", Float, nullable=False),
    Column("tokens", BigInteger, nullable=False),
    #: the child that ended first
    Column("first", String(64)),
    Column("created_at", UTCDateTime, nullable=False),
    #: when the join woke the parent (`each`: when its last result was delivered, or
    #: charged to the ended parent); NULL: not yet
    Column("woken_at", UTCDateTime),
    #: the ended children's ids in the order their ends counted (0022_each); NULL on rows
    #: from before, read as none
    Column("ends", Json),
    #: (`each`) how many of `ends` the parent has taken: delivered, or charged once it ended
    Column("delivered", Integer, nullable=False, server_default=text("0")),
    #: (`each`) the parent's call suspended on the join, which the next end wakes
    Column("waiting_call", String(64)),
    # the relay's scan for a join complete whose parent was not woken
    Index(
        "ix_tickwork_joins_unwoken",
        "parent_id",
        postgresql_where=text("woken_at IS NULL"),
        sqlite_where=text("woken_at IS NULL"),
    ),
)

outbox = Table(
    "tickwork_outbox",
    metadata,
    Column("session_id", String(64), _session_fk(), primary_key=True),
    Column("version", Integer, primary_key=True),
    #: when the tick is due; the relay republishes rows still here a threshold later
    Column("due_at", UTCDateTime, nullable=False),
    #: how often the relay published it again; each time it waits longer
    Column("republished", Integer, nullable=False, default=0, server_default="0"),
    #: when its message was last published; NULL: a delayed tick (model backoff,
    #: Retry-After) that waits here, not in the broker, until the relay publishes it when due
    Column("published_at", UTCDateTime),
    Index(None, "due_at"),
    Index(
        "ix_tickwork_outbox_waiting",
        "due_at",
        postgresql_where=text("published_at IS NULL"),
        sqlite_where=text("published_at IS NULL"),
    ),
)

dead_letters = Table(
    "tickwork_dead_letters",
    metadata,
    Column(
        "id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("session_id", String(64), nullable=False, unique=True),
    Column("code", String(32), nullable=False),
    Column("message", Text, nullable=False),
    Column("kind", String(200), nullable=False),
    Column("model", String(200), nullable=False),
    Column("last_tool", String(200)),
    Column("error_signature", String(300), nullable=False),
    Column("at", UTCDateTime, nullable=False),
    Column("schema_version", Integer, nullable=False),
    Column("snapshot", Json, nullable=False),
    Column("resolved_at", UTCDateTime),
    Column("resolution", Json),
    #: the failed session's tenant, so a tenant's dead letters are read without a join
    Column("tenant", String(64), nullable=False, server_default=text("'default'")),
    #: and who submitted it, for the tokens that see only their own sessions (own_only)
    Column("submitted_by", String(200), nullable=False, server_default=text("''")),
    Index(None, "code", "at"),
    # `dlq stats` groups by each of these: counted from the index, not the snapshots' rows
    Index(None, "kind", "at"),
    Index(None, "model", "at"),
    Index(None, "last_tool", "at"),
    Index(None, "error_signature", "at"),
    Index(None, "at"),
    Index(None, "tenant", "at"),
    Index(
        "ix_tickwork_dead_letters_unresolved",
        "at",
        postgresql_where=text("resolved_at IS NULL"),
        sqlite_where=text("resolved_at IS NULL"),
    ),
    # retention's scan for failed sessions whose dead letter was closed long enough ago
    Index(
        "ix_tickwork_dead_letters_resolved",
        "resolved_at",
        postgresql_where=text("resolved_at IS NOT NULL"),
        sqlite_where=text("resolved_at IS NOT NULL"),
    ),
)

#: dead letters per UTC day and value of each of `dead_letters.GROUPS`, kept with the table
#: (in the transactions that record and prune them), so stats sum days, not rows
dead_letter_counts = Table(
    "tickwork_dead_letter_counts",
    metadata,
    # tenant and grouping first: stats read one tenant's (or, summed, every tenant's) rows
    # of one grouping, from a day on if asked (the tenant: 0017_tenants)
    Column("tenant", String(64), primary_key=True),
    Column("grouping", String(32), primary_key=True),
    Column("day", Date, primary_key=True),
    # a NULL value (no last tool) is '' with is_null: a tool may be named '' too
    Column("is_null", Boolean, primary_key=True),
    Column("value", String(300), primary_key=True),
    Column("count", BigInteger, nullable=False),
)

#: the same counts over all time, so stats without a `since` read a row per value
dead_letter_totals = Table(
    "tickwork_dead_letter_totals",
    metadata,
    Column("tenant", String(64), primary_key=True),
    Column("grouping", String(32), primary_key=True),
    Column("is_null", Boolean, primary_key=True),
    Column("value", String(300), primary_key=True),
    Column("count", BigInteger, nullable=False),
)

blobs = Table(
    "tickwork_blobs",
    metadata,
    # the artifact store's default: files by the SHA-256 of their content, each stored once
    Column("hash", String(64), primary_key=True),
    Column("size", BigInteger, nullable=False),
    Column("data", LargeBinary, nullable=False),
)

file_changes = Table(
    "tickwork_file_changes",
    metadata,
    # what one tick changed in a session's files, saved with its observation at `version`
    Column("session_id", String(64), _session_fk(), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("step", Integer, nullable=False),
    #: the call whose tick made the change; "" for a fork's start or the final test run
    Column("call_id", String(64), nullable=False),
    #: path -> "<mode> <blob hash>", or null for a deleted file
    Column("changes", Json, nullable=False),
    #: the hash naming the files after this change (chained from the previous one)
    Column("state", String(64), nullable=False),
)

deliveries = Table(
    "tickwork_deliveries",
    metadata,
    # the webhook card of an `approval_requested` event: the event row, written with the
    # save, is the outbox; this row records the card's delivery (docs/DESIGN.md section 7)
    Column(
        "event_id",
        BigInteger().with_variant(Integer, "sqlite"),
        ForeignKey("tickwork_events.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("attempts", Integer, nullable=False, default=0, server_default="0"),
    #: when a dispatcher may try it (next); held ahead while one posts it; NULL: no more
    Column("next_attempt_at", UTCDateTime),
    Column("delivered_at", UTCDateTime),
    Column("last_error", Text, nullable=False, default="", server_default=text("''")),
    Index(
        "ix_tickwork_deliveries_due",
        "next_attempt_at",
        postgresql_where=text(DUE_SQL),
        sqlite_where=text(DUE_SQL),
    ),
    # the cards given up, by event: `tickwork webhooks ls` and `resend` (0027_given_up)
    Index(
        "ix_tickwork_deliveries_given_up",
        "event_id",
        postgresql_where=text(GIVEN_UP_SQL),
        sqlite_where=text(GIVEN_UP_SQL),
    ),
)

archived = Table(
    "tickwork_archived",
    metadata,
    # the sessions moved to the archive (issue 16): where each one's record is, and which
    # are claimed by a gc pass that has not finished (state "pending": still live)
    Column("session_id", String(64), primary_key=True),
    #: the batch's object name in the archive, without its extension
    Column("location", String(300), nullable=False),
    #: "pending" (claimed, written or being written, rows still live) or "archived"
    Column("state", String(16), nullable=False),
    Column("claimed_at", UTCDateTime, nullable=False),
    Column("archived_at", UTCDateTime),
    Column("status", String(32), nullable=False),
    Column("kind", String(200), nullable=False),
    #: lineage: the session this one was forked from, or spawned by, if any
    Column("parent_id", String(64)),
    Column("fork_step", Integer),
    #: a child's spawning call (a fork has none) and role, as on the session (0022)
    Column("spawn_call", String(64)),
    Column("role", String(64), nullable=False, server_default=text("''")),
    Column("created_at", UTCDateTime, nullable=False),
    #: when the session finished (its last update), which names its archive day
    Column("finished_at", UTCDateTime, nullable=False),
    #: its tenant, so an archived session is shown only to its own (0017_tenants)
    Column("tenant", String(64), nullable=False, server_default=text("'default'")),
    #: who submitted (or forked) it, for the own-only tokens' fork listings; NULL for a
    #: session archived before 0025_archived_submitter (unknown: read back from the archive)
    Column("submitted_by", String(200)),
    Index(None, "location"),
    Index(None, "parent_id"),
    # workers drop their working copies of the sessions archived since they last looked
    Index(None, "archived_at"),
    Index(
        "ix_tickwork_archived_pending",
        "claimed_at",
        postgresql_where=text("state = 'pending'"),
        sqlite_where=text("state = 'pending'"),
    ),
    # an archived session named by the start of its id, as a live one (0026_id_prefix)
    Index(
        "ix_tickwork_archived_id_prefix",
        "session_id",
        postgresql_ops={"session_id": "varchar_pattern_ops"},
    ),
)

environments = Table(
    "tickwork_environments",
    metadata,
    # a repair job's environment (docs/DESIGN.md section 13): built once per key across the
    # fleet, packed into the artifact store; the row is the build's claim (owner + lease,
    # like a tick's)
    Column("key", String(64), primary_key=True),
    #: "building", "ready" or "failed"
    Column("status", String(16), nullable=False),
    Column("owner", String(200)),
    Column("lease_expires_at", UTCDateTime),
    #: builds started in this round (a takeover after a lease ran out counts one more)
    Column("attempts", Integer, nullable=False),
    #: the packed environment's bytes, and its chunks' hashes in the artifact store in order
    Column("size", BigInteger, nullable=False),
    Column("chunks", Json, nullable=False),
    #: the setup's output (its end, capped)
    Column("log", Text, nullable=False),
    #: what was asked and found: setup commands, detected files, what could not be installed
    Column("detail", Json, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    #: when it became ready or failed
    Column("finished_at", UTCDateTime),
    Column("used_at", UTCDateTime, nullable=False),
)

environment_uses = Table(
    "tickwork_environment_uses",
    metadata,
    # which sessions use an environment: `env rm` and retention keep one a live session uses
    Column(
        "key",
        String(64),
        ForeignKey("tickwork_environments.key", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("session_id", String(64), _session_fk(), primary_key=True),
    Column("at", UTCDateTime, nullable=False),
    Index(None, "session_id"),
)
