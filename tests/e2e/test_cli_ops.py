"""config, db upgrade, the zero-configuration default, and relay --once."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import inspect, select

from store import make_engine
from store.schema import outbox
from tests.e2e.conftest import ROOT, TEST_KIND, Cli, Deployment, at_once, call, until
from tests.services import postgres_database

PASSWORD = "hunter2-db-secret"
KEY = "sk-proj-AbCdEf0123456789xyz"


def _bare_env(**settings: str) -> dict[str, str]:
    """The environment without any TICKWORK_ setting but these."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKWORK_")}
    return {**env, "PYTHONPATH": str(ROOT), **settings}


def test_config_masks_secrets(tmp_path: Path) -> None:
    cli = Cli(
        _bare_env(
            TICKWORK_DATABASE_URL=f"postgresql://tick:{PASSWORD}@db.internal:5432/tw",
            TICKWORK_BROKER_URL=f"redis://:{KEY}@redis.internal:6379/0",
            TICKWORK_MODEL=f"openai:gpt-4o?key={KEY}",
            TICKWORK_IMPORTS=f'["jobs:{KEY}"]',
            TICKWORK_STATE_DIR=str(tmp_path / "state"),
        ),
        tmp_path,
    )
    as_json = cli("config", "--json")
    as_table = cli.inline("config")
    shown = as_json.json()
    assert shown["database_url"] == "postgresql://tick:****@db.internal:5432/tw"
    assert shown["broker_url"] == "redis://:****@redis.internal:6379/0"
    assert shown["model"] == "openai:gpt-4o?key=****"
    assert shown["imports"] == ["jobs:****"]
    assert shown["budgets"]["max_steps"] == 50
    for output in (as_json.stdout, as_table.stdout):
        assert PASSWORD not in output and KEY not in output and "sk-proj" not in output
    assert "TICKWORK_DATABASE_URL" in as_table.stdout
    cli.inline("config", ok=False, TICKWORK_LEASE_S="soon").error(
        2, "invalid setting TICKWORK_LEASE_S"
    )
    cli.inline("config", ok=False, TICKWORK_TRANSCRIPT_CACHE="-1").error(
        2, "invalid setting TICKWORK_TRANSCRIPT_CACHE"
    )


def test_zero_configuration_and_db_upgrade(tmp_path: Path) -> None:
    state = tmp_path / "state"
    fresh = Cli(_bare_env(TICKWORK_STATE_DIR=str(state)), tmp_path)
    other = Cli(_bare_env(TICKWORK_STATE_DIR=str(tmp_path / "other")), tmp_path)
    unreachable = "postgresql://nobody@127.0.0.1:1/x"
    with postgres_database() as url:
        listed, upgraded, on_postgres = at_once(
            lambda: fresh("ls", "--json"),
            lambda: fresh("db", "upgrade", "--json"),
            lambda: other("db", "upgrade", "--json", TICKWORK_DATABASE_URL=url),
        )
        engine = make_engine(url)
        try:
            tables = set(inspect(engine).get_table_names())
        finally:
            engine.dispose()
    # the SQLite file did not exist: the schema was made first, whole, once
    assert listed.json() == []
    assert (state / "tickwork.db").exists()
    assert upgraded.json()["revision"]
    assert sorted(p.name for p in state.iterdir() if p.name.startswith(".")) == []
    done = on_postgres.json()
    assert {"tickwork_sessions", "tickwork_outbox", "tickwork_dead_letters"} <= tables
    assert done["revision"] == upgraded.json()["revision"]
    assert done["database_url"] == url  # no password to mask
    missing = other.inline("ls", ok=False, TICKWORK_DATABASE_URL=unreachable)
    missing.error(1, "cannot use the database", "TICKWORK_DATABASE_URL")


def test_relay_once_publishes_a_lost_tick(
    deployment: Deployment, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = deployment.client
    # as if the publish after commit had been lost: only the outbox row knows the tick
    monkeypatch.setattr(client, "publish", lambda session_id, version: None)
    script = deployment.script(
        [{"content": "hi", "tool_calls": [call("echo", text="x")]}, {"content": "bye"}]
    )
    sid = client.submit(TEST_KIND, {}, model=script).id

    counts = cli("relay", "--once", "--json", TICKWORK_RELAY_AFTER_S="0").json()
    assert counts == {"republished": 1, "lease_expiries": 0, "delayed": 0}
    with deployment.worker(relay=False):
        done = client.wait(sid, timeout=30)
    assert done.status.value == "completed" and done.final_answer == "bye"


def test_relay_once_publishes_a_delayed_tick_when_due(deployment: Deployment, cli: Cli) -> None:
    client = deployment.client
    error = {"transient": True, "message": "429 slow down", "retry_after_s": 0.5}
    sid = client.submit(TEST_KIND, {}, model=deployment.script([{"error": error}])).id
    with deployment.worker(relay=False):
        waiting = until(lambda: (h := client.get(sid)).model_attempts == 1 and h, what="retry")
    with client.store.engine.connect() as conn:
        (row,) = conn.execute(select(outbox).where(outbox.c.session_id == sid)).all()
    assert row.published_at is None and row.due_at > waiting.updated_at

    until(lambda: datetime.now(UTC) > row.due_at, what="the tick to fall due")
    counts = cli("relay", "--once", "--json").json()
    with deployment.worker(relay=False):
        again = until(lambda: (h := client.get(sid)).model_attempts == 2 and h, what="2nd call")

    assert counts == {"republished": 0, "lease_expiries": 0, "delayed": 1}
    assert again.status.value == "ready"
